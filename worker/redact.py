"""Secret-shaped strings out of everything the journal stores.

``redact(value)`` runs on every journal event and every tool result, so it is one precompiled
alternation applied in a single left-to-right pass per string. Every branch is anchored on a
literal (``sk-``, ``://``, ``password``, ``eyJ`` …) so that scanning stays linear even over a
megabyte of base64: no branch may start with an unbounded run of ordinary characters.

Shapes are specific on purpose: uuids, sha256 hex digests and base64 of ordinary text are
not secrets, and redacting them would wreck the run's trace.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

# Words that make a key secret, matched at the END of the key (so db_password, clientSecret,
# x-api-key count; tokens, token_count do not). Keys are compared lowercased without _ - . or
# spaces.
_SECRET_KEY_SUFFIXES = ("password", "passwd", "secret", "apikey", "token", "authorization",
                        "privatekey", "secretkey", "secretaccesskey")
_KEY_NOISE = str.maketrans("", "", "_-. ")

# Names of key=value pairs in free text. Longer alternatives first where one is a prefix of
# another, so "secret_access_key=" is taken whole rather than failing on "secret".
_KV_NAMES = (r"password|passwd|pwd|secret_access_key|secret_key|secret|api[_-]?key"
             r"|access_token|auth_token|token|private[_-]?key")

# Each branch: (?P<name> (?P<name_pre>kept)? secret (?P<name_post>kept)? ). The whole branch is
# replaced by pre + [REDACTED] + post.
_BRANCHES = {
    # Multi-line PEM block; a block cut off before its END line (a preview) is redacted to the end.
    "pem": r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    # scheme://user:PASSWORD@host -> keep the user; anchored on "://", not on the scheme. The
    # password runs to the LAST @ of the authority, since an unencoded password may contain @.
    "url": r"(?P<url_pre>://[^\s:/@\"'<>]+:)[^\s/\"'<>]+(?P<url_post>@)",
    # "password": "..." inside JSON text (a rendered tool result in an event).
    "jkv": r"(?P<jkv_pre>(?i:" + _KV_NAMES + r"|authorization)\"\s*:\s*\")"
           r"(?:[^\"\\]|\\.)+(?P<jkv_post>\")",
    # Authorization: Basic/Token/Digest xxx in header-like text (the scheme is required, so prose
    # such as "authorization: required" survives; Bearer has its own branch).
    "auth": r"(?P<auth_pre>(?i:authorization)\s*[:=]\s*(?i:basic|bearer|token|digest)\s+)"
            r"[^\s\"',;]+",
    "bearer": r"(?P<bearer_pre>\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*",
    # password=... ("password": "..." is the jkv branch; here only '=', so prose with colons
    # survives). A quoted value runs to its closing quote (or the line's end), spaces included.
    "kv": r"(?P<kv_pre>(?i:" + _KV_NAMES + r")\s*=\s*(?P<kv_q>[\"'])?)"
          r"(?(kv_q)(?:(?!(?P=kv_q))[^\n])+(?:(?P<kv_post>(?P=kv_q))|$)|[^\s\"'&;,]+)",
    "anthropic": r"\bsk-ant-[A-Za-z0-9_\-]{16,}",
    "openai": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "aws_id": r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
    "github": r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    "slack": r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
    "google": r"\bAIza[0-9A-Za-z_\-]{30,}",
    "tickwork": r"\btw_[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])",
    "jwt": r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
}
_PATTERN = re.compile("|".join(f"(?P<{name}>{body})" for name, body in _BRANCHES.items()),
                      re.MULTILINE)  # only kv uses $, as "end of this line"
_KEPT = {name: (f"{name}_pre" in _PATTERN.groupindex, f"{name}_post" in _PATTERN.groupindex)
         for name in _BRANCHES}


def _replace(match: re.Match[str]) -> str:
    # lastgroup is the branch's outer group: it closes after its inner pre/post groups.
    name = match.lastgroup or ""
    has_pre, has_post = _KEPT.get(name, (False, False))
    pre = (match.group(f"{name}_pre") if has_pre else "") or ""
    post = (match.group(f"{name}_post") if has_post else "") or ""  # None: optional, unmatched
    return f"{pre}{REDACTED}{post}"


def redact_text(text: str) -> str:
    """The text with every secret-shaped substring replaced by [REDACTED]."""
    return _PATTERN.sub(_replace, text)


def is_secret_key(key: str) -> bool:
    return key.lower().translate(_KEY_NOISE).endswith(_SECRET_KEY_SUFFIXES)


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with secrets redacted; non-container, non-string values
    (numbers, None, datetimes, uuids) are returned as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: _redact_item(key, item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    return value


def _redact_item(key: Any, item: Any) -> Any:
    # An empty string under a secret key leaks nothing and saying [REDACTED] would mislead.
    if isinstance(item, str) and item and isinstance(key, str) and is_secret_key(key):
        return REDACTED
    return redact(item)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def for_journal(value: Any) -> Any:
    """A journal payload: secrets redacted, and text Postgres' jsonb can store (NUL and lone
    UTF-16 surrogates become U+FFFD, the replacement character)."""
    return _storable(redact(value))


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value
