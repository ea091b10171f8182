"""Secret-shaped strings out of everything tickwork shows or stores: one redaction for all.

``redact(value)`` runs on every journal event, every tool result, every log line and every
approval's arguments, and it is the worker's largest CPU cost, so the common case (nothing to
redact) must stay cheap. Two steps:

1. A prefilter: plain substring tests (C speed) for the literal every rule needs (``sk-``,
   ``ghp_``, ``password``, ``://`` with ``@`` …). Text holding none of them is returned as is.
2. Only then the branches, precompiled: one alternation in a single left-to-right pass for
   short text, each branch searched on its own and merged for long text (``_matches``). Every
   branch is anchored on a literal (Discord tokens on the dots of their three-part shape) and
   bounded, so scanning stays linear even over a megabyte of base64.

The shapes come from the vendors' documented token prefixes, the same ones the detect-secrets
and gitleaks rules match (Stripe, GitLab, SendGrid, Hugging Face, Slack, npm, PyPI, Shopify,
Vault, DigitalOcean, Discord, Telegram, Azure, PGP/SSH private keys …), ported here rather than
depending on detect-secrets itself: it runs every plugin's own regex per line (plus entropy
scoring), several times our cost per event (bench/redact.py). Base64 that starts like the
encoding of a secret (a kubeconfig's client-key-data) is decoded and redacted if it holds one.

Shapes are specific on purpose: uuids, hex digests, file refs and base64 of ordinary text are
not secrets, and redacting them would wreck the run's trace. A secret becomes
``[REDACTED:kind]``, so a reader still knows what was there. A marker never hides what is not
a secret from a person deciding an approval: every span is bounded (a quoted value by its
closing quote on the line, a key block by the lines that look like a key's), a span that could
hold more than one word says how many characters it hid (``[REDACTED:private_key 1679
chars]``), and a key block without its END line is flagged (``…, unterminated]``).
"""

from __future__ import annotations

import base64
import functools
import heapq
import json
import re
import uuid
from typing import Any, Callable, Iterator

import orjson

from tickwork.sql.journal import storable

REDACTED_PREFIX = "[REDACTED:"
UNTERMINATED = "unterminated"  # a key block without its END line: only its key-like lines hid


def redacted(kind: str, hidden: str | None = None, *, counted: bool = False,
             unterminated: bool = False) -> str:
    """The marker for a secret: ``[REDACTED:kind]``. A span that could hide more than one word
    (a key block, or any span holding a space or line break) says how many characters it hid,
    ``[REDACTED:kind N chars]``, and a key block without its END line adds ``, unterminated``:
    a person deciding an approval sees how much text a marker stands for. A one-word secret
    (a token, a password) says nothing more, so its length is not shown."""
    details = []
    if hidden is not None and (counted or _SPACE.search(hidden)):
        details.append(f" {len(hidden)} chars")
    if unterminated:
        details.append(f", {UNTERMINATED}")
    return f"{REDACTED_PREFIX}{kind}{''.join(details)}]"


_SPACE = re.compile(r"\s")
# A marker in text being redacted again (it may hold spaces): taken whole, and left as it is.
_MARKER_TEXT = r"\[REDACTED:[a-z0-9_]+(?: \d+ chars)?(?:, unterminated)?\]"
_MARKER = re.compile(_MARKER_TEXT)

# Words that make a key secret, matched at the END of the key (so db_password, clientSecret,
# x-api-key, set-cookie count; tokens, token_count do not). Keys are compared lowercased
# without _ - . or spaces.
_SECRET_KEY_SUFFIXES = ("password", "passwd", "pwd", "passphrase", "secret", "apikey", "token",
                        "authorization", "privatekey", "secretkey", "secretaccesskey", "cookie",
                        "credential", "credentials", "accesskey", "accountkey", "encryptionkey",
                        "signingkey", "masterkey")
_KEY_NOISE = str.maketrans("", "", "_-. ")
# "pass" is a key of its own (pass, db_pass, dbPass), never the end of a word (bypass, compass).
_PASS_KEY = re.compile(r"(?:^|[_\-. ])(?i:pass)$|[a-z0-9]PASS$|[a-z0-9]Pass$")

# Names of key=value pairs in free text. Longer alternatives first where one is a prefix of
# another, so "secret_access_key=" is taken whole rather than failing on "secret". "pass" only
# as a word of its own (DB_PASS=, not bypass=).
_KV_NAMES = (r"password|passwd|passphrase|pwd|secret_access_key|secret_key_base|secret_key"
             r"|secret|api[_-]?key|access[_-]?token|auth[_-]?token|token|private[_-]?key"
             r"|accountkey|shared_?access_?key|access[_-]?key"
             r"|(?:encryption|signing|master|storage|app)[_-]?key|(?<![A-Za-z])pass(?![A-Za-z])")
# An unquoted value after a colon ("password: hunter2") is a secret only if it looks like one:
# 6+ characters with a letter and a digit or symbol (a sentence's closing . ! ? ) does not
# count). "password: required", "Access token: expired." and "Reset your password: click
# below" are prose.
_V = r"[^\s\"'<>,;]"
_COLON_VALUE = (rf"(?![/~])(?={_V}{{6}})(?={_V}*[A-Za-z])"
                rf"(?={_V}*?(?:[^A-Za-z\s\"'<>,;.!?)]|[.!?)]{_V})){_V}+")
# A quoted value runs to its closing quote on the same line, at most QUOTED_MAX characters;
# without one (a quote opened and never closed) only its first word is the secret, so an open
# quote never hides the rest of the text.
QUOTED_MAX = 256
_QUOTED = (r"(?:(?:(?!(?P={q}))[^\n]){{1,%d}}(?P<{post}>(?P={q}))|%s|[^\s\"']+)"
           % (QUOTED_MAX, _MARKER_TEXT.replace("{", "{{").replace("}", "}}")))

# Key blocks (PEM, OpenSSH, PGP, SSH2, PuTTY): the BEGIN line, then only lines that look like
# a key's (base64 of 16+ characters with a digit, + or /; the headers such blocks carry), then
# the END line. Lines are separated by whitespace or by \n escapes (a key inside JSON text).
# A block cut off before its END (a preview), or text that stops looking like a key, ends the
# span there: what follows is shown, and the marker says the block was unterminated.
_SEP = r"(?:[ \t\r\n]|\\[rn])+"
_B64_LINE = r"(?=[A-Za-z=]*[0-9+/])[A-Za-z0-9+/]{16,}={0,2}"
_SHORT_LINE = r"=?[A-Za-z0-9+/]{1,15}={0,2}"  # a body's short last line, a PGP checksum
_BEGINS = {"pem": r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
           "ssh2": r"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----",
           "putty": r"PuTTY-User-Key-File-\d:[^\n\\]*"}
_BEGIN = re.compile("|".join(_BEGINS.values()))


def _block(begin: str, headers: str, end: str, name: str) -> str:
    line = rf"(?:(?:{headers}):[^\n\\]*|{_B64_LINE})"
    return (rf"{begin}(?:{_SEP}{line})*+"
            rf"(?P<{name}_end>(?:{_SEP}{_SHORT_LINE}){{0,2}}{_SEP}{end})?")


_PEM_HEADERS = "Proc-Type|DEK-Info|Version|Comment|Hash|Charset"
_PUTTY_HEADERS = ("Encryption|Comment|Public-Lines|Private-Lines|Key-Derivation"
                  r"|Argon2-[A-Za-z]+")
# Base64 of text that starts with a secret's prefix (a kubeconfig's client-key-data, an
# encoded Stripe key): the prefixes' base64, whose first 4n/3 characters do not depend on what
# follows. A candidate is redacted only if its decoded text holds a secret (_replace).
_B64_OF = ("-----BEGIN", "sk_live_", "ghp_", "AKIA", "xoxb-", "password")
_B64_PREFIXES = tuple(base64.b64encode(p.encode()).decode()[:len(p) * 4 // 3] for p in _B64_OF)

# Each branch: (?P<name> (?P<name_pre>kept)? secret (?P<name_post>kept)? ). The whole branch is
# replaced by pre + [REDACTED:kind] + post. The kind is _KINDS[name], or for keyword branches
# derived from the keyword itself.
_BRANCHES = {
    "pem": _block(_BEGINS["pem"], _PEM_HEADERS,
                  r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", "pem"),
    "ssh2": _block(_BEGINS["ssh2"], "Comment|Subject",
                   r"---- END SSH2 ENCRYPTED PRIVATE KEY ----", "ssh2"),
    "putty": _block(_BEGINS["putty"], _PUTTY_HEADERS,
                    r"Private-MAC:[ \t]*[0-9a-fA-F]+", "putty"),
    # scheme://user:PASSWORD@host (user may be empty: redis://:pw@host) -> keep the user;
    # anchored on "://". The password runs to the LAST @ of the authority, since an unencoded
    # password may contain @.
    "url": r"(?P<url_pre>://[^\s:/@\"'<>]*:)[^\s/\"'<>]+(?P<url_post>@)",
    "slack_webhook": r"\bhooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
    # A registry login in JSON text (a Docker config's "auth": base64 of user:password).
    "docker_auth": r"(?P<docker_auth_pre>\"auth\"\s*:\s*\")[A-Za-z0-9+/]{8,}={0,2}"
                   r"(?P<docker_auth_post>\")",
    # "password": "..." inside JSON text (a rendered tool result in an event).
    "jkv": r"(?P<jkv_pre>(?P<jkv_key>(?i:" + _KV_NAMES + r"|authorization|set-cookie|cookie"
           r"|credentials?))\"\s*:\s*\")(?:[^\"\\]|\\.)+(?P<jkv_post>\")",
    # Authorization: Basic/Token/Digest xxx in header-like text (the scheme is required, so prose
    # such as "authorization: required" survives; Bearer has its own branch).
    "auth": r"(?P<auth_pre>(?i:authorization)\s*[:=]\s*(?i:basic|bearer|token|digest|bot|apikey"
            r"|api-key|ssws|key|negotiate|ntlm|oauth)\s+)[^\s\"',;]+",
    "bearer": r"(?P<bearer_pre>\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*",
    # Cookie: / Set-Cookie: headers carry session secrets: everything after name= to the line end.
    "cookie": r"(?P<cookie_pre>\b(?i:(?:set-)?cookie)\s*:\s*)[^\s=;:]+=[^\r\n]*",
    # .netrc: machine HOST login USER password SECRET (no = or : between word and value).
    "netrc": r"(?P<netrc_pre>\blogin[ \t]+\S+[ \t]+password[ \t]+)[^\s\"']+",
    # password=... / password := ... A quoted value runs to its closing quote (_QUOTED).
    "kv": r"(?P<kv_pre>(?P<kv_key>(?i:" + _KV_NAMES + r"))\s*:?=\s*(?P<kv_q>[\"'])?)"
          r"(?(kv_q)" + _QUOTED.format(q="kv_q", post="kv_post") + r"|(?:" + _MARKER_TEXT
          + r"|[^\s\"'&;,]+))",
    # Keys that are config, not prose (pwd:, passwd:, db_password:, DB_PASS:, x-auth-token:):
    # after a colon any unquoted value of 6+ characters is the secret (all letters included),
    # but a path (pwd: /home/bob).
    "cfg": r"(?P<cfg_pre>(?P<cfg_key>\b(?i:pwd|passwd)|\b[A-Za-z0-9]{1,64}[_-](?i:password|passwd"
           r"|pass|pwd|secret|token))[\"']?[ \t]*:[ \t]*)(?![/~\"'])(?:" + _MARKER_TEXT
           + "|" + _V + r"{6,})",
    # password: ... (YAML, prose, logs): quoted values always, unquoted ones only if they look
    # like a secret (_COLON_VALUE).
    "ckv": r"(?P<ckv_pre>(?P<ckv_key>(?i:" + _KV_NAMES + r"))[\"']?[ \t]*:[ \t]*(?P<ckv_q>[\"'])?)"
           r"(?(ckv_q)" + _QUOTED.format(q="ckv_q", post="ckv_post") + r"|(?:" + _MARKER_TEXT
           + "|" + _COLON_VALUE + "))",
    # Azure: a SAS URL's signature, and an Entra ID (AD) client secret (xxx8Q~...).
    "azure_sas": r"(?P<azure_sas_pre>(?<![A-Za-z0-9])sig=)[A-Za-z0-9%+/]{16,}(?:=|%3[Dd])*",
    "azure": r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"
             r"(?![A-Za-z0-9_~.\-])",
    "anthropic": r"\bsk-ant-[A-Za-z0-9_\-]{16,}",
    "openai": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "stripe": r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}|\bwhsec_[0-9A-Za-z]{24,}",
    "aws": r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
    "github": r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    "gitlab": r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-"
              r"[A-Za-z0-9_\-]{20,}|\bGR1348941[A-Za-z0-9_\-]{20,}",
    "slack": r"\bxox[abposre]-[A-Za-z0-9\-]{10,}|\bxapp-\d-[A-Za-z0-9\-]{10,}",
    "sendgrid": r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
    "huggingface": r"\bhf_[A-Za-z0-9]{30,}",
    "npm": r"\bnpm_[A-Za-z0-9]{36}\b",
    "pypi": r"\bpypi-AgE[A-Za-z0-9_\-]{50,}",
    "google": r"\bAIza[0-9A-Za-z_\-]{30,}|\bGOCSPX-[A-Za-z0-9_\-]{20,}|\bya29\.[0-9A-Za-z_\-]{20,}",
    "shopify": r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b",
    "vault": r"\bhv[sb]\.[A-Za-z0-9_\-]{24,}",
    "digitalocean": r"\bdo[por]_v1_[a-f0-9]{64}\b",
    "discord": r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\."
               r"[A-Za-z0-9_\-]{27,40}(?![A-Za-z0-9_\-])",
    "telegram": r"\b\d{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])",
    "age": r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",
    "sentry": r"\bsntry[su]_[A-Za-z0-9_=+/\-]{30,}",
    "databricks": r"\bdapi[a-f0-9]{32}(?:-\d)?\b",
    "atlassian": r"\bATATT3[A-Za-z0-9_\-=]{150,}",
    "linear": r"\blin_api_[A-Za-z0-9]{40}\b",
    "postman": r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b",
    "doppler": r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}\b",
    "grafana": r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|\bglc_[A-Za-z0-9+/]{32,}={0,2}",
    "newrelic": r"\bNRAK-[A-Z0-9]{27}\b",
    "mailgun": r"\bkey-[0-9a-f]{32}\b",
    "square": r"\bsq0(?:atp|csp)-[0-9A-Za-z_\-]{22,43}\b",
    "heroku": r"\bHRKU-[A-Za-z0-9_\-]{20,}",
    "tickwork": r"\btw_[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])",
    "jwt": r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
    "base64": r"(?<![A-Za-z0-9+/])(?:" + "|".join(re.escape(p) for p in _B64_PREFIXES)
              + r")[A-Za-z0-9+/]*={0,2}",
}
_KINDS = {"pem": "private_key", "ssh2": "private_key", "putty": "private_key",
          "url": "url_password", "auth": "authorization", "bearer": "bearer", "cookie": "cookie",
          "netrc": "password", "docker_auth": "credential"}
_BLOCKS = ("pem", "ssh2", "putty")
# Two ways to find the same matches. Short text: one alternation of every branch, one pass
# (a search per branch costs more than the text). Long text: one pattern per branch, each
# searched on its own and merged (_matches): a pattern that starts with a literal is found by
# the engine's fast literal scan, which the alternation forgoes (3-6 times slower on a megabyte
# of base64 or of repeated keywords).
SHORT_SCAN = 4096
_PATTERN = re.compile("|".join(f"(?P<{name}>{body})" for name, body in _BRANCHES.items()),
                      re.MULTILINE)
_PATTERNS = tuple(re.compile(f"(?P<{name}>{body})", re.MULTILINE)  # $ only as "line's end"
                  for name, body in _BRANCHES.items())
_GROUPS = {name: tuple(f"{name}_{part}" if f"{name}_{part}" in pattern.groupindex else None
                       for part in ("pre", "post", "key"))
           for name, pattern in zip(_BRANCHES, _PATTERNS)}


def _matches(text: str) -> Iterator[re.Match[str]]:
    """The secrets in the text, left to right, as one alternation of the branches in their
    order would find them: at each position the first branch that matches there wins, and the
    scan goes on after its match. Each branch's next match is searched again only when a match
    taken before it covered its start, so the text is read about once per branch."""
    lowered = text.lower()
    searchers = [_searcher(name, pattern, text, lowered)
                 for name, pattern in zip(_BRANCHES, _PATTERNS)]
    upcoming = {index: search(0) for index, search in enumerate(searchers)}
    position = 0
    while True:
        best: re.Match[str] | None = None
        best_index = -1
        for index in list(upcoming):
            found = upcoming[index]
            if found is not None and found.start() < position:
                found = upcoming[index] = searchers[index](position)
            if found is None:
                del upcoming[index]
            elif best is None or found.start() < best.start():
                best, best_index = found, index
        if best is None:
            return
        yield best
        position = best.end()
        upcoming[best_index] = searchers[best_index](position)


# The keyword branches start with a case-insensitive alternation of names, which the engine
# tries at every position (about a microsecond a character). Over long text they are tried
# only where a name's stem occurs (found in the lowered text at C speed). Every name of
# _KV_NAMES starts with one of _KV_STEMS; cfg's match may start at the word before its stem.
_KV_STEMS = ("pass", "pwd", "secret", "api", "access", "auth", "token", "private", "accountkey",
             "shared", "encryption", "signing", "master", "storage", "app")
_STEMS = {"kv": _KV_STEMS, "ckv": _KV_STEMS,
          "jkv": _KV_STEMS + ("set-cookie", "cookie", "credential"),
          "cfg": ("pwd", "pass", "secret", "token")}
_CFG_WORD = 64  # cfg's word before the stem: at most this long (the pattern says so too)


def _top_level_parts(body: str) -> list[str]:
    """The pattern's alternatives at its top level (outside groups and classes)."""
    parts, depth, in_class, escaped, last = [], 0, False, False, 0
    for index, char in enumerate(body):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(body[last:index])
            last = index + 1
    return parts + [body[last:]]


# A branch each of whose alternatives starts with \b and a letter or digit is searched for
# without its first \b (a pattern that starts with a literal is scanned for at C speed; \b
# first, it is tried at every position), and a match right after a word character is passed
# over: the same matches.
_WORD_STARTED = {name: re.compile(f"(?P<{name}>{body[2:]})", re.MULTILINE)
                 for name, body in _BRANCHES.items()
                 if all(re.match(r"\\b[A-Za-z0-9]", part) for part in _top_level_parts(body))}
_WORD_CHAR = re.compile(r"\w")


def _searcher(name: str, pattern: re.Pattern[str], text: str,
              lowered: str) -> Callable[[int], re.Match[str] | None]:
    unbounded = _WORD_STARTED.get(name)
    if unbounded is not None:
        def after_a_boundary(position: int) -> re.Match[str] | None:
            while (found := unbounded.search(text, position)) is not None:
                start = found.start()
                if start == 0 or _WORD_CHAR.match(text, start - 1) is None:
                    return found
                position = start + 1
            return None
        return after_a_boundary
    stems = _STEMS.get(name)
    if stems is None or len(lowered) != len(text):  # (a few characters lower to two)
        return lambda position: pattern.search(text, position)
    occurrences = _occurrences(lowered, stems)
    pending = [next(occurrences, None)]

    def starts(at: int) -> tuple[int, ...]:
        if name != "cfg" or at < 2 or text[at - 1] not in "_-":
            return (at,)
        word = at - 1
        while word > 0 and at - 1 - word < _CFG_WORD and text[word - 1].isascii() \
                and text[word - 1].isalnum():
            word -= 1
        return (word, at) if word < at - 1 else (at,)

    def search(position: int) -> re.Match[str] | None:
        while pending[0] is not None:
            for start in starts(pending[0]):
                if start >= position:
                    found = pattern.match(text, start)
                    if found is not None:
                        return found
            pending[0] = next(occurrences, None)
        return None
    return search


def _occurrences(lowered: str, stems: tuple[str, ...]) -> Iterator[int]:
    """Where any of the stems occurs, in order, each place once."""
    heap = [(place, stem) for stem in stems if (place := lowered.find(stem)) >= 0]
    heapq.heapify(heap)
    last = -1
    while heap:
        place, stem = heap[0]
        if place != last:
            yield place
            last = place
        following = lowered.find(stem, place + 1)
        if following >= 0:
            heapq.heapreplace(heap, (following, stem))
        else:
            heapq.heappop(heap)


# The prefilter: every branch needs one of these literals. Matched case-insensitively (on the
# lowered text) for the keyword rules, exactly for the vendor prefixes.
_ANY_CASE = ("pass", "pwd", "secret", "token", "api_key", "apikey", "api-key", "private",
             "accountkey", "auth", "bearer", "cookie", "credential", "access_key", "accesskey",
             "access-key", "encryption", "signing", "master", "storage", "app_key", "appkey",
             "app-key")
_EXACT = ("sk-", "sk_", "rk_", "whsec_", "AKIA", "ASIA", "ABIA", "ACCA", "ghp_", "gho_", "ghu_",
          "ghs_", "ghr_", "github_pat_",
          "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-",
          "glagent-", "gloas-", "GR1348941", "xox", "xapp-", "SG.", "hf_", "npm_", "pypi-",
          "AIza", "GOCSPX-", "ya29.", "tw_", "eyJ", "-----BEGIN", "---- BEGIN", "PuTTY-",
          "hooks.slack.com", "sig=", "Q~", "shp", "hvs.", "hvb.", "_v1_", ":AA", "sntr", "dapi", "ATATT3", "lin_api_", "PMAK-", "dp.", "glsa_", "glc_", "NRAK-",
          "key-", "sq0", "HRKU-") + _B64_PREFIXES
# Discord bot tokens have no literal prefix: the dots around their 6-character middle part are
# the prefilter's test (a pattern that starts with a literal is scanned for fast).
_DISCORD_HINT = re.compile(r"\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27}")


def _gated(literals: tuple[str, ...], gate_of) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The literals grouped under a substring they all hold (the gate), so a text without the
    gate skips the whole group: each literal test is a scan of the text."""
    groups: dict[str, list[str]] = {}
    for literal in literals:
        groups.setdefault(gate_of(literal), []).append(literal)
    return tuple((gate, tuple(sorted(set(members)))) for gate, members in groups.items())


_EXACT_GATED = _gated(_EXACT, lambda literal: next((c for c in "_-." if c in literal), ""))
_ANY_CASE_GATED = _gated(_ANY_CASE, lambda literal: literal[:3])


def _holds_any(text: str, gated: tuple[tuple[str, tuple[str, ...]], ...]) -> bool:
    for gate, members in gated:
        if gate in text:
            if len(members) == 1 and members[0] == gate:
                return True
            for literal in members:
                if literal in text:
                    return True
    return False


def might_hold_secret(text: str) -> bool:
    """False only if no rule can match: the cheap test that spares most text the regex."""
    if "://" in text and "@" in text:
        return True
    if _holds_any(text, _EXACT_GATED) or _holds_any(text.lower(), _ANY_CASE_GATED):
        return True
    return _DISCORD_HINT.search(text) is not None


def _replace(match: re.Match[str]) -> str:
    # lastgroup is the branch's outer group: it closes after its inner pre/post groups.
    name = match.lastgroup or ""
    pre_group, post_group, key_group = _GROUPS.get(name, (None, None, None))
    pre = (match.group(pre_group) if pre_group else "") or ""
    post = (match.group(post_group) if post_group else "") or ""  # None: optional, unmatched
    whole = match.group(name)
    hidden = whole[len(pre):len(whole) - len(post)]
    if _MARKER.fullmatch(hidden) or (name == "base64" and not _encodes_secret(hidden)):
        return whole  # already redacted (a quoted marker holds a space): redacting is idempotent
    kind = key_kind(match.group(key_group)) if key_group else _KINDS.get(name, name)
    block = name in _BLOCKS
    unterminated = block and match.group(f"{name}_end") is None
    return f"{pre}{redacted(kind, hidden, counted=block, unterminated=unterminated)}{post}"


def _encodes_secret(candidate: str) -> bool:
    """Whether base64 text decodes to text holding a secret (one level: the decoded text's own
    base64 is not decoded again)."""
    try:
        decoded = base64.b64decode(candidate + "=" * (-len(candidate) % 4)).decode("utf-8",
                                                                                   "replace")
    except ValueError:
        return False
    if not might_hold_secret(decoded):
        return False
    found = _PATTERN.finditer(decoded) if len(decoded) <= SHORT_SCAN else _matches(decoded)
    return any(match.lastgroup != "base64" for match in found)


def redact_text(text: str) -> str:
    """The text with every secret-shaped substring replaced by [REDACTED:kind]."""
    if not might_hold_secret(text):
        return text
    if len(text) <= SHORT_SCAN:
        return _PATTERN.sub(_replace, text)
    pieces, position = [], 0
    for match in _matches(text):
        pieces.append(text[position:match.start()])
        pieces.append(_replace(match))
        position = match.end()
    if not pieces:
        return text
    pieces.append(text[position:])
    return "".join(pieces)


# Text still being written (a streamed answer): how much of it can be shown now. A secret's
# value follows its literal closely (a keyword, its separator and value; a vendor prefix and
# its token; a BEGIN line and the key), so text within HOLD_CHARS of the end that holds a
# literal may still become a secret. WINDOW_CHARS bounds what is held: past it, all but the
# last word goes out (the stream puts an unfinished key block's BEGIN line back in front of
# what follows, so its later lines are still redacted: streaming.TextStream).
HOLD_CHARS = 256
WINDOW_CHARS = 16384
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def settled(text: str) -> int:
    """How many leading characters of ``text``, an answer still being written, can be shown
    now (redacted on their own, as the journal redacts each event) with the same result as
    redacting the whole answer: the cut is always at a word's start, and never inside a secret
    or before one that more text could still complete or lengthen. Held back: the last word (a
    token may still grow), text from a rule's literal near the end on (its value may follow),
    a match reaching the end, and a key block whose END line has not come."""
    # Past the window (bounded): only a match that the cut would split is still respected.
    forced = len(text) > WINDOW_CHARS
    cut = _word_start(text, len(text))
    if not forced:
        region = _word_start(text, len(text[:max(0, len(text) - HOLD_CHARS)].rstrip()))
        literal = _first_literal(text, region)
        if literal is not None:
            cut = min(cut, _word_start(text, literal))
    if not might_hold_secret(text):
        return cut if cut or not forced else len(text)
    found = _PATTERN.finditer(text) if len(text) <= SHORT_SCAN else _matches(text)
    for match in found:
        start, end = match.span()
        if start >= cut:
            break
        name = match.lastgroup or ""
        open_block = name in _BLOCKS and match.group(f"{name}_end") is None
        if end > cut or (not forced and (end >= len(text) or open_block)):
            cut = _word_start(text, start)
            break
    return cut if cut or not forced else len(text)


def open_block_head(text: str) -> str | None:
    """The BEGIN line of a key block that ``text`` ends inside (no END line, key-like lines up
    to its end), or None: text cut at the window ends there, and the block's next lines must
    still be known for what they are."""
    if "BEGIN" not in text and "PuTTY-" not in text:
        return None
    found = _PATTERN.finditer(text) if len(text) <= SHORT_SCAN else _matches(text)
    for match in found:
        name = match.lastgroup or ""
        if name in _BLOCKS and match.group(f"{name}_end") is None \
                and not text[match.end():].strip():
            return _BEGIN.match(match.group()).group()  # type: ignore[union-attr]
    return None


def _word_start(text: str, index: int) -> int:
    """The start of the word holding text[index - 1] (index itself after a space); 0 if none."""
    found = _LAST_SPACE.search(text, 0, index)
    return found.end() if found else 0


def _first_literal(text: str, start: int) -> int | None:
    """Where the first literal any rule starts with occurs in text[start:], or None."""
    lowered = text.lower()
    places = [text.find(literal, start) for literal in _EXACT + ("://",)]
    places += [lowered.find(literal, start) for literal in _ANY_CASE]
    hint = _DISCORD_HINT.search(text, start)
    if hint is not None:
        places.append(hint.start())
    places = [place for place in places if place >= 0]
    return min(places) if places else None


def _normal_key(key: str) -> str:
    return key.lower().translate(_KEY_NOISE)


def is_secret_key(key: str) -> bool:
    normal = _normal_key(key)
    return normal.endswith(_SECRET_KEY_SUFFIXES) or (
        normal.endswith("pass") and _PASS_KEY.search(key) is not None)


def key_kind(key: str) -> str:
    """What a secret under this key (or keyword) is called in [REDACTED:kind]."""
    key = _normal_key(key)
    if "pass" in key or key.endswith("pwd"):
        return "password"
    for kind in ("cookie", "token", "credential", "authorization"):
        if kind in key:
            return kind
    if key.endswith(("apikey", "accountkey")):
        return "api_key"
    if key.endswith("privatekey"):
        return "private_key"
    return "secret"


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with secrets redacted; non-container, non-string values
    (numbers, None, datetimes, uuids) are returned as they are, but for a uuid under a secret
    key (a run's token), which is redacted as a string there is."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: _redact_item(key, item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    return value


def _redact_item(key: Any, item: Any) -> Any:
    if isinstance(key, str) and isinstance(item, (str, dict, list, tuple, uuid.UUID)) \
            and is_secret_key(key):
        return _all_strings(item, key_kind(key))
    return redact(item)


def _all_strings(value: Any, kind: str) -> Any:
    """Under a secret key every string is the secret ({"credentials": {"user": …, "pw": …}});
    an empty string leaks nothing and saying [REDACTED] would mislead. A uuid there is its
    text."""
    if isinstance(value, str):
        return redacted(kind) if value else value
    if isinstance(value, uuid.UUID):
        return redacted(kind)
    if isinstance(value, dict):
        return {key: _all_strings(item, kind) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_all_strings(item, kind) for item in value]
    return value




def journal_json(value: Any) -> str:
    """A journal payload as the JSON text that is stored: what for_journal gives, encoded.

    Most payloads hold nothing to redact (a turn number, a verdict, prose), so they are
    encoded first (orjson: compact, nothing escaped to ASCII) and the text is tested once: no
    rule's literal in it, no word a secret key ends with in it (lowercased, without _ - . and
    spaces, as keys are compared), no NUL. Every string and key of the payload appears in that
    text as it is (the literals and words hold no character JSON escapes), so a text that
    passes holds nothing for_journal would change, and the payload is not copied. A payload
    orjson refuses (a lone surrogate, a key that is not text, an integer past 64 bits) or
    that fails the test goes the whole way."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        return _journal_json_redacted(value)
    plain = _plain_short(text) if len(text) <= SHORT_TEXT else _plain(text)
    return text if plain else _journal_json_redacted(value)


def _journal_json_redacted(value: Any) -> str:
    return json.dumps(for_journal(value), ensure_ascii=False, separators=(",", ":"))


# The words a secret key ends with, as one scan (C speed) instead of a loop over them.
_SECRET_KEY_WORD = re.compile("|".join(_SECRET_KEY_SUFFIXES))


# Short payloads repeat from run to run ({"turn": 1}, a verdict and its reason, a tool's usual
# arguments): their verdict is remembered (a lookup of the text, against some 57,000 machine
# instructions to test it; counted with callgrind), a bounded number of them.
SHORT_TEXT = 256


@functools.lru_cache(maxsize=4096)
def _plain_short(text: str) -> bool:
    return _plain(text)


def _plain(text: str) -> bool:
    if might_hold_secret(text) or "\\u0000" in text:
        return False
    return _SECRET_KEY_WORD.search(text.lower().translate(_KEY_NOISE)) is None


def for_journal(value: Any) -> Any:
    """A journal payload: secrets redacted, and text Postgres' jsonb can store (NUL and lone
    UTF-16 surrogates become U+FFFD, the replacement character)."""
    return storable(redact(value))
