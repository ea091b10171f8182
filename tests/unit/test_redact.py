"""Redaction: secret shapes go, ordinary text (uuids, digests, base64 of prose) stays."""

import base64
import hashlib
import uuid
from datetime import datetime, timezone

import pytest

from worker.redact import REDACTED, redact, redact_text

R = REDACTED


def body(n: int, alphabet: str = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYz") -> str:
    """Deterministic token-looking characters. Fakes are assembled at run time so that no
    secret scanner mistakes this file for a leak."""
    return "".join(alphabet[(i * 7) % len(alphabet)] for i in range(n))


UPPER = body(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
JWT = "eyJ" + body(20) + ".eyJ" + body(30) + "." + body(43)
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + body(60) + "\n" + body(64)
       + "\n-----END RSA PRIVATE KEY-----")

POSITIVE = [
    ("openai", f"key is {'sk-'}{body(48)} ok", f"key is {R} ok"),
    ("openai project", f"{'sk-proj-'}{body(60)}", R),
    ("anthropic", f"use {'sk-ant-'}api03-{body(80)}", f"use {R}"),
    ("aws access key id", f"id={'AK'}IA{UPPER}", f"id={R}"),
    ("aws temporary key id", f"{'AS'}IA{UPPER} in text", f"{R} in text"),
    ("aws secret", "aws_secret_access_key=" + body(40, "abcXYZ0123456789+/"),
     f"aws_secret_access_key={R}"),
    ("aws secret in env", "AWS_SECRET_ACCESS_KEY = '" + body(40) + "'",
     f"AWS_SECRET_ACCESS_KEY = '{R}'"),
    ("github classic", f"{'gh'}p_{body(36)}", R),
    ("github oauth", f"token {'gh'}o_{body(36)}.", f"token {R}."),
    ("github server", f"{'gh'}s_{body(36)}", R),
    ("github fine-grained", f"{'github'}_pat_11ABC{body(70)}", R),
    ("slack bot", f"{'xo'}xb-1234567890-{body(24)}", R),
    ("slack user", f"{'xo'}xp-12-34-{body(30)}", R),
    ("google", f"{'AI'}za{body(35)}", R),
    ("tickwork", f"token: {'tw_'}{body(43)}", f"token: {R}"),
    ("bearer", f"Authorization: Bearer {'tw_'}{body(43)}", f"Authorization: Bearer {R}"),
    ("bearer jwt", f"bearer {JWT}", f"bearer {R}"),
    ("basic auth header", "Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: Basic {R}"),
    ("jwt", f"jwt={JWT}&next=1", f"jwt={R}&next=1"),
    ("jwt alone", f"got {JWT} back", f"got {R} back"),
    ("pem", f"before\n{PEM}\nafter", f"before\n{R}\nafter"),
    ("pem cut off", f"key:\n{PEM[:90]}", f"key:\n{R}"),
    ("postgres url", "postgresql://app:s3cr3t-pw@db.internal:5432/app",
     f"postgresql://app:{R}@db.internal:5432/app"),
    ("redis url with @ in password", "redis://default:p@ss@cache:6379",
     f"redis://default:{R}@cache:6379"),
    ("url in json text", '{"dsn":"mysql://u:pw1@h/db","email":"a@b.c"}',
     f'{{"dsn":"mysql://u:{R}@h/db","email":"a@b.c"}}'),
    ("password kv", "login with user=bob password=hunter2 now", f"login with user=bob password={R} now"),
    ("quoted kv", "PASSWORD=\"correct horse\" next", f"PASSWORD=\"{R}\" next"),
    ("single-quoted kv", "pwd='it is' x=1", f"pwd='{R}' x=1"),
    ("unclosed quote kv", "password=\"abc", f"password=\"{R}"),
    ("secret kv", "client_secret=abc123&grant=1", f"client_secret={R}&grant=1"),
    ("api_key kv", "https://x.test/v1?api_key=abcd1234&q=1", f"https://x.test/v1?api_key={R}&q=1"),
    ("apikey kv", "apiKey = zyx987", f"apiKey = {R}"),
    ("token kv", "TOKEN=abc.def", f"TOKEN={R}"),
    ("json text", '{"user":"bob","password":"hunter2","db_token":"x1"}',
     f'{{"user":"bob","password":"{R}","db_token":"{R}"}}'),
    ("json text spaced", '{"Authorization": "Basic abc=="}', f'{{"Authorization": "{R}"}}'),
]

NEGATIVE = [
    "The quick brown fox jumps over the lazy dog.",
    "0192f3a4-5b6c-7d8e-9f00-112233445566",
    str(uuid.UUID(int=2**127 + 12345)),
    hashlib.sha256(b"hello").hexdigest(),
    hashlib.sha1(b"hello").hexdigest(),
    base64.b64encode(b"The quick brown fox jumps over the lazy dog").decode(),
    base64.urlsafe_b64encode(b"Record 12 is an invoice opened on day 3; priority 2.").decode(),
    "f_" + uuid.UUID(int=7).hex,
    "Bearer tokens are short-lived.",
    "Reset your password: click the link below.",
    "the authorization header is required",
    "task-management and disk-usage are fine",
    "http://example.com:8080/path@v2",
    "https://api.example.com/v1/runs?limit=20&cursor=abc",
    "mailto:alice@example.com, alice@example.com",
    "AKIAshort and tw_short and sk-short",
    "eyJhbGciOi without dots",
    "v1.2.3 build 2026-06-01T12:00:00Z",
    "Record 7 is a ticket opened on day 8; priority 4.",
    "max_tokens: 4096 and input_tokens=120",  # "tokens", not "token"
    "",
]


@pytest.mark.parametrize("text,expected", [(t, e) for _, t, e in POSITIVE],
                         ids=[name for name, _, _ in POSITIVE])
def test_secret_shapes_are_redacted(text, expected):
    assert redact(text) == expected
    assert redact(expected) == expected  # idempotent: redacting twice changes nothing


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_text_is_untouched(text):
    assert redact(text) == text


@pytest.mark.parametrize("key", ["password", "PASSWORD", "db_password", "DbPassword", "secret",
                                 "client_secret", "clientSecret", "api_key", "apiKey", "x-api-key",
                                 "apikey", "token", "access_token", "refreshToken",
                                 "Authorization", "private_key", "privateKey",
                                 "aws_secret_access_key", "passwd"])
def test_values_under_secret_keys_are_redacted(key):
    assert redact({key: "plain words", "other": "plain words"}) == {key: R, "other": "plain words"}


@pytest.mark.parametrize("key", ["tokens", "max_tokens", "token_count", "secretary", "passwords_changed",
                                 "title", "keyword", "tool"])
def test_ordinary_keys_keep_their_values(key):
    assert redact({key: "plain words"}) == {key: "plain words"}


def test_nested_values_are_copied_with_secrets_redacted():
    when, ident = datetime(2026, 6, 1, tzinfo=timezone.utc), uuid.UUID(int=5)
    value = {"config": {"db": {"password": "x", "host": "db"}},
             "items": [{"api_key": "y", "n": 1}, ("Bearer " + body(30), None, True, 2.5)],
             "token": 5, "secret": "", "at": when, "id": ident}
    original = repr(value)
    assert redact(value) == {
        "config": {"db": {"password": R, "host": "db"}},
        "items": [{"api_key": R, "n": 1}, [f"Bearer {R}", None, True, 2.5]],
        "token": 5, "secret": "", "at": when, "id": ident}
    assert repr(value) == original  # the input is not modified


def test_ordinary_records_and_a_megabyte_of_base64_pass_through_untouched():
    # Speed is measured in bench/, never asserted here. A branch that backtracked per position
    # would make the megabyte below quadratic: the test's own timeout (pytest-timeout) is the
    # only clock involved, far above any busy machine's time for a linear scan.
    records = [{"id": i, "title": f"Record {i}", "category": "invoice",
                "body": f"Record {i} is an invoice opened on day {i % 28}; priority {i % 4}."}
               for i in range(500)]
    assert redact(records) == records
    blob = base64.b64encode(bytes(range(256)) * 3000).decode()
    assert redact_text(blob) == blob


def test_journal_payloads_replace_what_jsonb_cannot_store_and_keep_the_rest():
    from worker.redact import for_journal

    payload = {"text": "a\x00b\ud800c", "k\x00": ["ok", "sk-" + "x" * 40]}
    assert for_journal(payload) == {"text": "a\ufffdb\ufffdc", "k\ufffd": ["ok", "[REDACTED]"]}
