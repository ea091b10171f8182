"""The shapes of secrets: one pattern per kind (a branch), the marker a secret becomes, and the
literals the prefilter looks for. worker/redact.py applies them; worker/secret_scan.py finds
them in long text; worker/streaming.py holds back text they may still match.

Each branch: (?P<name> (?P<name_pre>kept)? secret (?P<name_post>kept)? ). The whole branch is
replaced by pre + marker + post. Every branch needs one of the prefilter's literals, is
anchored on it and bounded, so scanning stays linear.
"""

from __future__ import annotations

import base64
import re

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
MARKER = re.compile(_MARKER_TEXT)

# Names of key=value pairs in free text. Longer alternatives first where one is a prefix of
# another, so "secret_access_key=" is taken whole rather than failing on "secret". "pass" only
# as a word of its own (DB_PASS=, not bypass=).
_KV_NAMES = (r"password|passwd|passphrase|pwd|secret_access_key|secret_key_base|secret_key"
             r"|secret|api[_-]?key|access[_-]?token|auth[_-]?token|token|private[_-]?key"
             r"|accountkey|shared_?access_?key|access[_-]?key"
             r"|(?:encryption|signing|master|storage|app)[_-]?key|(?<![A-Za-z])pass(?![A-Za-z])")
# The first letters of those names: one character test that spares every other position the
# case-insensitive alternation of every name.
_KEY_FIRST = r"(?=[aAcCeEmMpPsStT])"
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
BEGIN = re.compile("|".join(_BEGINS.values()))


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
# replaced by pre + [REDACTED:kind] + post. The kind is KINDS[name], or for keyword branches
# derived from the keyword itself.
BRANCHES = {
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
    "jkv": _KEY_FIRST + r"(?P<jkv_pre>(?P<jkv_key>(?i:" + _KV_NAMES + r"|authorization|set-cookie|cookie"
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
    "kv": _KEY_FIRST + r"(?P<kv_pre>(?P<kv_key>(?i:" + _KV_NAMES + r"))\s*:?=\s*(?P<kv_q>[\"'])?)"
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
    "ckv": _KEY_FIRST + r"(?P<ckv_pre>(?P<ckv_key>(?i:" + _KV_NAMES + r"))[\"']?[ \t]*:[ \t]*(?P<ckv_q>[\"'])?)"
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
KINDS = {"pem": "private_key", "ssh2": "private_key", "putty": "private_key",
          "url": "url_password", "auth": "authorization", "bearer": "bearer", "cookie": "cookie",
          "netrc": "password", "docker_auth": "credential"}
BLOCKS = ("pem", "ssh2", "putty")
# Two ways to find the same matches. Short text: one alternation of every branch, one pass
# (a search per branch costs more than the text). Long text: one pattern per branch, each
# searched on its own and merged (_matches): a pattern that starts with a literal is found by
# the engine's fast literal scan, which the alternation forgoes (3-6 times slower on a megabyte
# of base64 or of repeated keywords).
SHORT_SCAN = 4096
PATTERN = re.compile("|".join(f"(?P<{name}>{body})" for name, body in BRANCHES.items()),
                      re.MULTILINE)
PATTERNS = tuple(re.compile(f"(?P<{name}>{body})", re.MULTILINE)  # $ only as "line's end"
                  for name, body in BRANCHES.items())
GROUPS = {name: tuple(f"{name}_{part}" if f"{name}_{part}" in pattern.groupindex else None
                       for part in ("pre", "post", "key"))
           for name, pattern in zip(BRANCHES, PATTERNS)}


# The prefilter: every branch needs one of these literals. Matched case-insensitively (on the
# lowered text) for the keyword rules, exactly for the vendor prefixes.
ANY_CASE = ("pass", "pwd", "secret", "token", "api_key", "apikey", "api-key", "private",
             "accountkey", "auth", "bearer", "cookie", "credential", "access_key", "accesskey",
             "access-key", "encryption", "signing", "master", "storage", "app_key", "appkey",
             "app-key", "login")  # login: where a .netrc line starts (a stream holds it)
EXACT = ("sk-", "sk_", "rk_", "whsec_", "AKIA", "ASIA", "ABIA", "ACCA", "ghp_", "gho_", "ghu_",
          "ghs_", "ghr_", "github_pat_",
          "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-",
          "glagent-", "gloas-", "GR1348941", "xox", "xapp-", "SG.", "hf_", "npm_", "pypi-",
          "AIza", "GOCSPX-", "ya29.", "tw_", "eyJ", "-----BEGIN", "---- BEGIN", "PuTTY-",
          "hooks.slack.com", "sig=", "Q~", "shp", "hvs.", "hvb.", "_v1_", ":AA", "sntr", "dapi", "ATATT3", "lin_api_", "PMAK-", "dp.", "glsa_", "glc_", "NRAK-",
          "key-", "sq0", "HRKU-") + _B64_PREFIXES
# Discord bot tokens have no literal prefix: the dots around their 6-character middle part are
# the prefilter's test (a pattern that starts with a literal is scanned for fast).
DISCORD_HINT = re.compile(r"\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27}")


def _gated(literals: tuple[str, ...], gate_of) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The literals grouped under a substring they all hold (the gate), so a text without the
    gate skips the whole group: each literal test is a scan of the text."""
    groups: dict[str, list[str]] = {}
    for literal in literals:
        groups.setdefault(gate_of(literal), []).append(literal)
    return tuple((gate, tuple(sorted(set(members)))) for gate, members in groups.items())


_EXACT_GATED = _gated(EXACT, lambda literal: next((c for c in "_-." if c in literal), ""))
_ANY_CASE_GATED = _gated(ANY_CASE, lambda literal: literal[:3])


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
    return DISCORD_HINT.search(text) is not None


