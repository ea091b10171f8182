"""Secret-shaped strings out of everything tickwork shows or stores: one redaction for all.

``redact(value)`` runs on every journal event, every tool result, every log line and every
approval's arguments, and it is the worker's largest CPU cost, so the common case (nothing to
redact) must stay cheap. Two steps:

1. A prefilter: plain substring tests (C speed) for the literal every rule needs (``sk-``,
   ``ghp_``, ``password``, ``://`` with ``@`` …). Text holding none of them is returned as is.
2. Only then the branches (worker/secret_shapes.py), precompiled: one alternation in a single
   left-to-right pass for short text, each branch searched on its own and merged for long text
   (worker/secret_scan.py). Every branch is anchored on a literal (Discord tokens on the dots
   of their three-part shape) and bounded, so scanning stays linear even over a megabyte of
   base64.

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
import json
import re
import uuid
from typing import Any

import orjson

from tickwork.sql.journal import storable
from tickwork.worker.secret_scan import find_secrets
from tickwork.worker.secret_shapes import (BLOCKS, GROUPS, KINDS, MARKER, PATTERN,
                                           REDACTED_PREFIX, SHORT_SCAN, might_hold_secret,
                                           redacted)

__all__ = ["REDACTED_PREFIX", "for_journal", "journal_json", "might_hold_secret", "redact",
           "redact_text", "redacted"]

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

def _replace(match: re.Match[str]) -> str:
    # lastgroup is the branch's outer group: it closes after its inner pre/post groups.
    name = match.lastgroup or ""
    pre_group, post_group, key_group = GROUPS.get(name, (None, None, None))
    pre = (match.group(pre_group) if pre_group else "") or ""
    post = (match.group(post_group) if post_group else "") or ""  # None: optional, unmatched
    whole = match.group(name)
    hidden = whole[len(pre):len(whole) - len(post)]
    if MARKER.fullmatch(hidden) or (name == "base64" and not _encodes_secret(hidden)):
        return whole  # already redacted (a quoted marker holds a space): redacting is idempotent
    kind = key_kind(match.group(key_group)) if key_group else KINDS.get(name, name)
    block = name in BLOCKS
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
    return any(match.lastgroup != "base64" for match in find_secrets(decoded))


def redact_text(text: str) -> str:
    """The text with every secret-shaped substring replaced by [REDACTED:kind]."""
    if not might_hold_secret(text):
        return text
    if len(text) <= SHORT_SCAN:
        return PATTERN.sub(_replace, text)
    pieces, position = [], 0
    for match in find_secrets(text):
        pieces.append(text[position:match.start()])
        pieces.append(_replace(match))
        position = match.end()
    if not pieces:
        return text
    pieces.append(text[position:])
    return "".join(pieces)


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
