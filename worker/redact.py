"""Secret-shaped strings out of everything tickwork shows or stores: one redaction for all.

``redact(value)`` runs on every journal event, every tool result, every log line and every
approval's arguments, and it is the worker's largest CPU cost, so the common case (nothing to
redact) must stay cheap. Two steps:

1. A prefilter: plain substring tests (C speed) for the literal every rule needs (``sk-``,
   ``ghp_``, ``password``, ``://`` with ``@`` …). Text holding none of them is returned as is.
2. Only then one precompiled alternation, applied in a single left-to-right pass. Every
   branch is anchored on a literal so scanning stays linear even over a megabyte of base64.

The shapes come from the vendors' documented token prefixes, the same ones the detect-secrets
plugins match (Stripe, GitLab, SendGrid, Hugging Face, Slack, npm, PyPI, PGP/SSH private keys
…), ported here rather than depending on detect-secrets itself: it runs every plugin's own
regex per line (plus entropy scoring), several times our cost per event (bench/redact.py).
Shapes without a literal anchor (Discord and Telegram bot tokens, Twilio and Mailchimp
secrets) are not detected by shape; the keyword rules catch them when they are labelled.

Shapes are specific on purpose: uuids, hex digests, file refs and base64 of ordinary text are
not secrets, and redacting them would wreck the run's trace. A secret becomes
``[REDACTED:kind]``, so a reader still knows what was there.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from typing import Any

import orjson

from tickwork.sql.journal import storable

REDACTED_PREFIX = "[REDACTED:"


def redacted(kind: str) -> str:
    return f"{REDACTED_PREFIX}{kind}]"


# Words that make a key secret, matched at the END of the key (so db_password, clientSecret,
# x-api-key, set-cookie count; tokens, token_count do not). Keys are compared lowercased
# without _ - . or spaces.
_SECRET_KEY_SUFFIXES = ("password", "passwd", "pwd", "passphrase", "secret", "apikey", "token",
                        "authorization", "privatekey", "secretkey", "secretaccesskey", "cookie",
                        "credential", "credentials")
_KEY_NOISE = str.maketrans("", "", "_-. ")

# Names of key=value pairs in free text. Longer alternatives first where one is a prefix of
# another, so "secret_access_key=" is taken whole rather than failing on "secret".
_KV_NAMES = (r"password|passwd|passphrase|pwd|secret_access_key|secret_key|secret"
             r"|api[_-]?key|access[_-]?token|auth[_-]?token|token|private[_-]?key|accountkey")
# An unquoted value after a colon ("password: hunter2") is a secret only if it looks like one:
# 6+ characters with a letter and a digit or symbol (a sentence's closing . ! ? ) does not
# count). "password: required", "Access token: expired." and "Reset your password: click
# below" are prose.
_V = r"[^\s\"'<>,;]"
_COLON_VALUE = (rf"(?={_V}{{6}})(?={_V}*[A-Za-z])"
                rf"(?={_V}*?(?:[^A-Za-z\s\"'<>,;.!?)]|[.!?)]{_V})){_V}+")
_QUOTED = r"(?:(?!(?P={q}))[^\n])+(?:(?P<{post}>(?P={q}))|$)"

# Each branch: (?P<name> (?P<name_pre>kept)? secret (?P<name_post>kept)? ). The whole branch is
# replaced by pre + [REDACTED:kind] + post. The kind is _KINDS[name], or for keyword branches
# derived from the keyword itself.
_BRANCHES = {
    # Multi-line key blocks; a block cut off before its END line (a preview) is redacted to the
    # end. RSA/EC/DSA/OpenSSH/PKCS#8 ("PRIVATE KEY") and PGP ("PRIVATE KEY BLOCK").
    "pem": r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
           r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    "ssh2": r"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----[\s\S]*?"
            r"(?:---- END SSH2 ENCRYPTED PRIVATE KEY ----|\Z)",
    "putty": r"PuTTY-User-Key-File-\d:[\s\S]*?(?:Private-MAC:[^\n]*|\Z)",
    # scheme://user:PASSWORD@host (user may be empty: redis://:pw@host) -> keep the user;
    # anchored on "://". The password runs to the LAST @ of the authority, since an unencoded
    # password may contain @.
    "url": r"(?P<url_pre>://[^\s:/@\"'<>]*:)[^\s/\"'<>]+(?P<url_post>@)",
    "slack_webhook": r"\bhooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
    # "password": "..." inside JSON text (a rendered tool result in an event).
    "jkv": r"(?P<jkv_pre>(?P<jkv_key>(?i:" + _KV_NAMES + r"|authorization|set-cookie|cookie"
           r"|credentials?))\"\s*:\s*\")(?:[^\"\\]|\\.)+(?P<jkv_post>\")",
    # Authorization: Basic/Token/Digest xxx in header-like text (the scheme is required, so prose
    # such as "authorization: required" survives; Bearer has its own branch).
    "auth": r"(?P<auth_pre>(?i:authorization)\s*[:=]\s*(?i:basic|bearer|token|digest)\s+)"
            r"[^\s\"',;]+",
    "bearer": r"(?P<bearer_pre>\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*",
    # Cookie: / Set-Cookie: headers carry session secrets: everything after name= to the line end.
    "cookie": r"(?P<cookie_pre>\b(?i:(?:set-)?cookie)\s*:\s*)[^\s=;:]+=[^\r\n]*",
    # password=... / password := ... A quoted value runs to its closing quote (or the line's
    # end), spaces included.
    "kv": r"(?P<kv_pre>(?P<kv_key>(?i:" + _KV_NAMES + r"))\s*:?=\s*(?P<kv_q>[\"'])?)"
          r"(?(kv_q)" + _QUOTED.format(q="kv_q", post="kv_post") + r"|[^\s\"'&;,]+)",
    # password: ... (YAML, prose, logs): quoted values always, unquoted ones only if they look
    # like a secret (_COLON_VALUE).
    "ckv": r"(?P<ckv_pre>(?P<ckv_key>(?i:" + _KV_NAMES + r"))[\"']?[ \t]*:[ \t]*(?P<ckv_q>[\"'])?)"
           r"(?(ckv_q)" + _QUOTED.format(q="ckv_q", post="ckv_post") + r"|" + _COLON_VALUE + ")",
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
    "tickwork": r"\btw_[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])",
    "jwt": r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
}
_KINDS = {"pem": "private_key", "ssh2": "private_key", "putty": "private_key",
          "url": "url_password", "auth": "authorization", "bearer": "bearer", "cookie": "cookie"}
_PATTERN = re.compile("|".join(f"(?P<{name}>{body})" for name, body in _BRANCHES.items()),
                      re.MULTILINE)  # only the quoted keyword values use $, as "line's end"
_GROUPS = {name: tuple(f"{name}_{part}" if f"{name}_{part}" in _PATTERN.groupindex else None
                       for part in ("pre", "post", "key"))
           for name in _BRANCHES}

# The prefilter: every branch needs one of these literals. Matched case-insensitively (on the
# lowered text) for the keyword rules, exactly for the vendor prefixes.
_ANY_CASE = ("pass", "pwd", "secret", "token", "api_key", "apikey", "api-key", "private",
             "accountkey", "authorization", "bearer", "cookie", "credential")
_EXACT = ("sk-", "sk_", "rk_", "whsec_", "AKIA", "ASIA", "ABIA", "ACCA", "ghp_", "gho_", "ghu_",
          "ghs_", "ghr_", "github_pat_",
          "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-",
          "glagent-", "gloas-", "GR1348941", "xox", "xapp-", "SG.", "hf_", "npm_", "pypi-",
          "AIza", "GOCSPX-", "ya29.", "tw_", "eyJ", "-----BEGIN", "---- BEGIN", "PuTTY-",
          "hooks.slack.com")


def might_hold_secret(text: str) -> bool:
    """False only if no rule can match: the cheap test that spares most text the regex."""
    if "://" in text and "@" in text:
        return True
    for literal in _EXACT:
        if literal in text:
            return True
    lowered = text.lower()
    for literal in _ANY_CASE:
        if literal in lowered:
            return True
    return False


def _replace(match: re.Match[str]) -> str:
    # lastgroup is the branch's outer group: it closes after its inner pre/post groups.
    name = match.lastgroup or ""
    pre_group, post_group, key_group = _GROUPS.get(name, (None, None, None))
    pre = (match.group(pre_group) if pre_group else "") or ""
    post = (match.group(post_group) if post_group else "") or ""  # None: optional, unmatched
    kind = key_kind(match.group(key_group)) if key_group else _KINDS.get(name, name)
    return f"{pre}{redacted(kind)}{post}"


def redact_text(text: str) -> str:
    """The text with every secret-shaped substring replaced by [REDACTED:kind]."""
    if not might_hold_secret(text):
        return text
    return _PATTERN.sub(_replace, text)


def _normal_key(key: str) -> str:
    return key.lower().translate(_KEY_NOISE)


def is_secret_key(key: str) -> bool:
    return _normal_key(key).endswith(_SECRET_KEY_SUFFIXES)


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
