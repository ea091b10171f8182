"""Redaction: secret shapes go, ordinary text (uuids, digests, base64 of prose) stays."""

import base64
import hashlib
import json
import uuid
from datetime import datetime, timezone

import pytest

from tickwork.worker.redact import might_hold_secret, redact, redact_text, redacted


def body(n: int, alphabet: str = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYz") -> str:
    """Deterministic token-looking characters. Fakes are assembled at run time so that no
    secret scanner mistakes this file for a leak."""
    return "".join(alphabet[(i * 7) % len(alphabet)] for i in range(n))


UPPER = body(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
JWT = "eyJ" + body(20) + ".eyJ" + body(30) + "." + body(43)
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + body(60) + "\n" + body(64)
       + "\n-----END RSA PRIVATE KEY-----")


def R(kind: str) -> str:
    return redacted(kind)


def RC(kind: str, chars: int, unterminated: bool = False) -> str:
    """The marker of a span that could hide more than one word: it says how much it hid."""
    return f"[REDACTED:{kind} {chars} chars{', unterminated' if unterminated else ''}]"


def hexs(n: int) -> str:
    return body(n, "0123456789abcdef")


# (name, text, expected). At least 25 realistic shapes, every one assembled from fragments.
POSITIVE = [
    ("openai", f"key is {'sk-'}{body(48)} ok", f"key is {R('openai')} ok"),
    ("openai project", f"{'sk-'}proj-{body(60)}", R("openai")),
    ("anthropic", f"use {'sk-'}ant-api03-{body(80)}", f"use {R('anthropic')}"),
    ("aws access key id", f"id={'AK'}IA{UPPER}", f"id={R('aws')}"),
    ("aws temporary key id", f"{'AS'}IA{UPPER} in text", f"{R('aws')} in text"),
    ("aws secret", "aws_secret_access_key=" + body(40, "abcXYZ0123456789+/"),
     f"aws_secret_access_key={R('secret')}"),
    ("aws secret in env", "AWS_SECRET_ACCESS_KEY = '" + body(40) + "'",
     f"AWS_SECRET_ACCESS_KEY = '{R('secret')}'"),
    ("github classic", f"{'gh'}p_{body(36)}", R("github")),
    ("github oauth", f"token {'gh'}o_{body(36)}.", f"token {R('github')}."),
    ("github server", f"{'gh'}s_{body(36)}", R("github")),
    ("github fine-grained", f"{'github'}_pat_11ABC{body(70)}", R("github")),
    ("gitlab personal", f"{'gl'}pat-{body(20)}", R("gitlab")),
    ("gitlab deploy", f"git clone with {'gl'}dt-{body(24)} now",
     f"git clone with {R('gitlab')} now"),
    ("gitlab runner", f"{'GR'}1348941{body(20)}", R("gitlab")),
    ("slack bot", f"{'xo'}xb-1234567890-{body(24)}", R("slack")),
    ("slack user", f"{'xo'}xp-12-34-{body(30)}", R("slack")),
    ("slack app", f"{'xa'}pp-1-A0{body(30)}", R("slack")),
    ("slack webhook",
     f"post to https://{'hooks'}.slack.com/services/T0{UPPER[:8]}/B0{UPPER[:8]}/{body(24)}",
     f"post to https://{R('slack_webhook')}"),
    ("stripe live secret", f"{'sk'}_live_{body(24)}", R("stripe")),
    ("stripe restricted", f"{'rk'}_test_{body(24)}", R("stripe")),
    ("stripe webhook secret", f"{'wh'}sec_{body(32)}", R("stripe")),
    ("sendgrid", f"{'SG'}.{body(22)}.{body(43)}", R("sendgrid")),
    ("hugging face", f"HF: {'hf'}_{body(34)}", f"HF: {R('huggingface')}"),
    ("npm", f"{'np'}m_{body(36)}", R("npm")),
    ("npmrc auth token", f"//registry.example/:_authToken={hexs(8)}-{hexs(4)}",
     f"//registry.example/:_authToken={R('token')}"),
    ("pypi", f"{'py'}pi-AgEIcHlwaS5vcmc{body(70)}", R("pypi")),
    ("google api key", f"{'AI'}za{body(35)}", R("google")),
    ("google oauth secret", f"{'GOC'}SPX-{body(28)}", R("google")),
    ("google access token", f"{'ya'}29.{body(40)}", R("google")),
    ("tickwork", f"use {'tw_'}{body(43)}", f"use {R('tickwork')}"),
    ("labelled tickwork", f"token: {'tw_'}{body(43)}", f"token: {R('token')}"),
    ("bearer header", f"Authorization: Bearer {'tw_'}{body(43)}",
     f"Authorization: Bearer {R('authorization')}"),
    ("bearer jwt", f"bearer {JWT}", f"bearer {R('bearer')}"),
    ("basic auth header", "Authorization: Basic dXNlcjpwYXNzd29yZA==",
     f"Authorization: Basic {R('authorization')}"),
    ("cookie header", "Cookie: sid=" + body(20) + "; theme=dark\nnext",
     f"Cookie: {RC('cookie', 36)}\nnext"),
    ("set-cookie header", "Set-Cookie: session=" + body(20) + "; HttpOnly",
     f"Set-Cookie: {RC('cookie', 38)}"),
    ("jwt", f"jwt={JWT}&next=1", f"jwt={R('jwt')}&next=1"),
    ("jwt alone", f"got {JWT} back", f"got {R('jwt')} back"),
    ("rsa pem", f"before\n{PEM}\nafter", f"before\n{RC('private_key', len(PEM))}\nafter"),
    ("pem cut off", f"key:\n{PEM[:90]}", f"key:\n{RC('private_key', 90, unterminated=True)}"),
    ("openssh key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn" + body(70)
     + "\n-----END OPENSSH PRIVATE KEY-----", RC("private_key", 146)),
    ("pgp private key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF" + body(64)
     + "\n-----END PGP PRIVATE KEY BLOCK-----\n", RC("private_key", 145) + "\n"),
    ("postgres url", "postgresql://app:s3cr3t-pw@db.internal:5432/app",
     f"postgresql://app:{R('url_password')}@db.internal:5432/app"),
    ("redis url without user", "redis://:p4ss" + body(6) + "@cache:6379/0",
     f"redis://:{R('url_password')}@cache:6379/0"),
    ("redis url with @ in password", "redis://default:p@ss@cache:6379",
     f"redis://default:{R('url_password')}@cache:6379"),
    ("url in json text", '{"dsn":"mysql://u:pw1@h/db","email":"a@b.c"}',
     f'{{"dsn":"mysql://u:{R("url_password")}@h/db","email":"a@b.c"}}'),
    ("password kv", "login with user=bob password=hunter2 now",
     f"login with user=bob password={R('password')} now"),
    ("password colon", "password: hunter2", f"password: {R('password')}"),
    ("pwd colon", "user: bob\npwd: Tr0ub4dor&3\n", f"user: bob\npwd: {R('password')}\n"),
    ("passphrase colon quoted", 'passphrase: "correct horse battery"',
     f'passphrase: "{RC("password", 21)}"'),
    ("python dict repr", "{'password': 'x y z'}", f"{{'password': '{RC('password', 5)}'}}"),
    ("walrus", "db_password := s3cr3t!", f"db_password := {R('password')}"),
    ("quoted kv", "PASSWORD=\"correct horse\" next", f"PASSWORD=\"{RC('password', 13)}\" next"),
    ("single-quoted kv", "pwd='it is' x=1", f"pwd='{RC('password', 5)}' x=1"),
    ("unclosed quote kv", "password=\"abc", f"password=\"{R('password')}"),
    ("secret kv", "client_secret=abc123&grant=1", f"client_secret={R('secret')}&grant=1"),
    ("api_key kv", "https://x.test/v1?api_key=abcd1234&q=1",
     f"https://x.test/v1?api_key={R('api_key')}&q=1"),
    ("apikey kv", "apiKey = zyx987", f"apiKey = {R('api_key')}"),
    ("token kv", "TOKEN=abc.def", f"TOKEN={R('token')}"),
    ("twilio labelled", f"TWILIO_AUTH_TOKEN={hexs(32)}", f"TWILIO_AUTH_TOKEN={R('token')}"),
    ("azure account key", f"AccountName=x;AccountKey={body(86)}==;EndpointSuffix=core",
     f"AccountName=x;AccountKey={R('api_key')};EndpointSuffix=core"),
    ("json text", '{"user":"bob","password":"hunter2","db_token":"x1"}',
     f'{{"user":"bob","password":"{R("password")}","db_token":"{R("token")}"}}'),
    ("json text spaced", '{"Authorization": "Basic abc=="}',
     f'{{"Authorization": "{RC("authorization", 11)}"}}'),
    ("json cookie", '{"cookie": "sid=1"}', f'{{"cookie": "{R("cookie")}"}}'),
]

# Harmless look-alikes: none may change.
NEGATIVE = [
    "The quick brown fox jumps over the lazy dog.",
    "0192f3a4-5b6c-7d8e-9f00-112233445566",  # uuid7
    str(uuid.UUID(int=2**127 + 12345)),
    str(uuid.uuid4()),
    uuid.uuid4().hex,
    hashlib.sha256(b"hello").hexdigest(),
    hashlib.sha1(b"hello").hexdigest(),
    hashlib.md5(b"hello").hexdigest(),
    "commit " + hashlib.sha1(b"tree").hexdigest()[:12] + " fixed the parser",
    "sha256:" + hashlib.sha256(b"layer").hexdigest(),
    base64.b64encode(b"The quick brown fox jumps over the lazy dog").decode(),
    base64.urlsafe_b64encode(b"Record 12 is an invoice opened on day 3; priority 2.").decode(),
    "f_" + uuid.UUID(int=7).hex,
    '{"offloaded": true, "file_ref": "f_' + uuid.UUID(int=99).hex + '", "chars": 12000}',
    "eyJhbGciOi without dots",
    "eyJhbGciOiJIUzI1NiJ9.not-a-payload",  # JWT-like but no payload segment
    "Bearer tokens are short-lived.",
    "Reset your password: click the link below.",
    "password: required",
    "Password: Required (8+ characters)",
    "the authorization header is required",
    "max_tokens: 4096 and input_tokens=120",  # "tokens", not "token"
    '{"token_count": 812, "prompt_tokens": 40}',
    "token_count: 812",
    "http://example.com:8080/path@v2",
    "https://api.example.com/v1/runs?limit=20&cursor=abc",
    "https://user@example.com/repo.git",  # a user, no password
    "mailto:alice@example.com, alice@example.com",
    "AKIAshort and tw_short and sk-short and hf_short and SG.short",
    "task-management and disk-usage are fine",
    "v1.2.3 build 2026-06-01T12:00:00Z",
    "Record 7 is a ticket opened on day 8; priority 4.",
    "Total: $1,299.00 (was $1,499.00); 20% off",
    "The cookie policy: we use cookies for login.",
    "ghost_town and github.com/org/repo and xoxo hugs",
    "passport: 12345678",
    '{"token_type": "bearer", "expires_in": 3600}',
    "Access token: expired. Input token: 1,234",
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
                                 "aws_secret_access_key", "passwd", "pwd", "cookie", "Set-Cookie",
                                 "credentials", "passphrase", "db_credential"])
def test_values_under_secret_keys_are_redacted(key):
    redacted_value = redact({key: "plain words", "other": "plain words"})
    assert redacted_value["other"] == "plain words"
    assert redacted_value[key].startswith("[REDACTED:") and "plain" not in redacted_value[key]


def test_kinds_name_what_was_there():
    assert redact({"pwd": "a", "set-cookie": "b", "api_key": "c", "credentials": "d"}) == {
        "pwd": R("password"), "set-cookie": R("cookie"), "api_key": R("api_key"),
        "credentials": R("credential")}


def test_everything_under_a_credentials_key_is_redacted():
    value = {"credentials": {"user": "bob", "pw": "hunter2", "port": 5432, "hosts": ["a", ""]}}
    assert redact(value) == {"credentials": {"user": R("credential"), "pw": R("credential"),
                                             "port": 5432, "hosts": [R("credential"), ""]}}


@pytest.mark.parametrize("key", ["tokens", "max_tokens", "token_count", "secretary",
                                 "passwords_changed", "title", "keyword", "tool",
                                 "cookies_enabled", "passport", "credentials_checked_at"])
def test_ordinary_keys_keep_their_values(key):
    assert redact({key: "plain words"}) == {key: "plain words"}


def test_nested_values_are_copied_with_secrets_redacted():
    when, ident = datetime(2026, 6, 1, tzinfo=timezone.utc), uuid.UUID(int=5)
    value = {"config": {"db": {"password": "x", "host": "db"}},
             "items": [{"api_key": "y", "n": 1}, ("Bearer " + body(30), None, True, 2.5)],
             "token": 5, "secret": "", "at": when, "id": ident}
    original = repr(value)
    assert redact(value) == {
        "config": {"db": {"password": R("password"), "host": "db"}},
        "items": [{"api_key": R("api_key"), "n": 1}, [f"Bearer {R('bearer')}", None, True, 2.5]],
        "token": 5, "secret": "", "at": when, "id": ident}
    assert repr(value) == original  # the input is not modified


def test_a_uuid_under_a_secret_key_is_redacted_and_any_other_uuid_kept():
    token, ident = uuid.UUID(int=7), uuid.UUID(int=8)
    assert redact({"run_token": token, "execution_id": ident, "auth": {"id": token}}) == {
        "run_token": R("token"), "execution_id": ident, "auth": {"id": token}}
    assert redact({"credentials": [token, "x", 3]}) == {
        "credentials": [R("credential"), R("credential"), 3]}


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
    from tickwork.worker.redact import for_journal

    payload = {"text": "a\x00b\ud800c", "k\x00": ["ok", "sk-" + "x" * 40]}
    assert for_journal(payload) == {"text": "a\ufffdb\ufffdc",
                                    "k\ufffd": ["ok", "[REDACTED:openai]"]}


def test_the_prefilter_lets_every_positive_through_and_skips_plain_text():
    # The cheap test may say yes to harmless text (the regex decides), never no to a secret.
    assert all(might_hold_secret(text) for _, text, _ in POSITIVE)
    assert not might_hold_secret("Record 7 is a ticket opened on day 8; priority 4.")
    assert not might_hold_secret(hashlib.sha256(b"x").hexdigest())


# journal_json: the stored text of a payload, with its fast path for payloads with nothing to
# redact. It must always say exactly what for_journal says.
SECRET_KEYS = ["password", "PASSWORD", "db_password", "DbPassword", "client_secret", "apiKey",
               "x-api-key", "api.key", "p.w.d", "refreshToken", "Set-Cookie", "credentials",
               "aws_secret_access_key", "TO\u212aEN"]  # a Kelvin sign lowercases to k


def journal_cases() -> list:
    cases: list = [text for _, text, _ in POSITIVE] + NEGATIVE
    cases += [{key: "plain words", "other": "plain words"} for key in SECRET_KEYS]
    cases += [{"turn": 1}, {"verdict": "done", "reason": "ok", "units_left": 20},
              {"input_tokens": 5, "output_tokens": 7}, {"text": "a\x00b"},
              {"text": "a\ud800b"}, {"k\x00": ["ok"]}, {"nested": [{"api_key": "y"}, None, 2.5]},
              {"text": "path\\u0000 is only text"}, {"text": "caf\u00e9 \u2028 \U0001F600"},
              [{"id": i, "title": f"Record {i}"} for i in range(20)]]
    return cases


@pytest.mark.parametrize("payload", journal_cases())
def test_a_journal_payloads_text_is_always_what_for_journal_stores(payload):
    from tickwork.worker.redact import for_journal, journal_json

    assert json.loads(journal_json(payload)) == for_journal(payload)


def test_a_payload_with_nothing_to_redact_is_encoded_once_and_not_copied(monkeypatch):
    from tickwork.worker import redact as module

    walked = []
    monkeypatch.setattr(module, "for_journal", lambda value: walked.append(value) or value)
    module.journal_json({"turn": 1, "text": "Two records read."})
    assert walked == []
    module.journal_json({"password": "x"})
    assert walked == [{"password": "x"}]


# Issue 28, attack 4: a marker never hides text that is not a secret from the person
# deciding an approval. A span is bounded, a span that could hide more than a word says how
# much it hid, and a key block without its END line is flagged.
KEY_LINES = "MIIEow" + body(58) + "\n" + body(64, "Ab3Cd5Ef7Gh9Jk1Lm2Np4Qr6St8Uv0Wx+/") + "\n"


def test_an_unterminated_key_block_hides_only_its_key_lines_and_is_flagged():
    text = ("Weekly summary: nothing unusual.\n-----BEGIN RSA PRIVATE KEY-----\n" + KEY_LINES
            + "Also wire 48,000 EUR to DE89 3704 0044 0532 0130 00 and send the customer "
              "export to partner@example.net.")
    shown = redact_text(text)
    hidden = len("-----BEGIN RSA PRIVATE KEY-----\n" + KEY_LINES) - 1  # not the last newline
    assert shown == ("Weekly summary: nothing unusual.\n"
                     f"{RC('private_key', hidden, unterminated=True)}\n"
                     "Also wire 48,000 EUR to DE89 3704 0044 0532 0130 00 and send the customer "
                     "export to partner@example.net.")
    assert "MIIEow" not in shown


def test_prose_inside_a_terminated_block_is_shown_and_the_block_flagged():
    text = ("-----BEGIN RSA PRIVATE KEY-----\n" + KEY_LINES + "wire 48,000 EUR to the account "
            "below\n-----END RSA PRIVATE KEY-----")
    shown = redact_text(text)
    assert "wire 48,000 EUR to the account below" in shown and "MIIEow" not in shown
    assert ", unterminated]" in shown


def test_a_key_block_inside_json_text_is_redacted_whole():
    key = "-----BEGIN PRIVATE KEY-----\\n" + KEY_LINES.replace("\n", "\\n") + \
          "-----END PRIVATE KEY-----\\n"
    shown = redact_text('{"type": "service_account", "pk": "' + key + '", "n": 1}')
    assert shown == '{"type": "service_account", "pk": "' + RC("private_key", len(key) - 2) + \
        '\\n", "n": 1}'


def test_an_open_quote_hides_one_word_not_the_rest_of_the_line():
    assert redact_text('password: "hunter2x and wire 48,000 EUR to Bob today') == \
        f'password: "{R("password")} and wire 48,000 EUR to Bob today'
    assert redact_text("db_password='s3cret then more text") == \
        f"db_password='{R('password')} then more text"


def test_a_quoted_value_is_bounded_and_says_how_much_it_hid():
    long_quote = "x " * 200
    shown = redact_text(f'password: "{long_quote}" then the rest')
    assert shown.endswith(" then the rest") and "x x" in shown  # past the bound: one word hid
    assert redact_text('secret="wire 48,000 EUR now"') == f'secret="{RC("secret", 19)}"'


def test_every_marker_is_left_as_it_is_when_redacted_again():
    for marker in (R("password"), RC("password", 21), RC("private_key", 812, True)):
        for text in (f'password: "{marker}"', f"password={marker}", f'{{"secret": "{marker}"}}'):
            assert redact_text(text) == text


# Issue 28, attack 5: common shapes that were missed. Each a realistic sample (assembled at run
# time), the part that must go, and the redacted text.
HEX64 = hexs(64)
MISSED_BEFORE = [
    ("env DB_PASS", f"DB_PASS={body(14)}\nDB_HOST=db", f"DB_PASS={R('password')}\nDB_HOST=db"),
    ("env ENCRYPTION_KEY", f"ENCRYPTION_KEY={body(32)}", f"ENCRYPTION_KEY={R('secret')}"),
    ("env SIGNING_KEY", f"export JWT_SIGNING_KEY='{body(40)}'",
     f"export JWT_SIGNING_KEY='{R('secret')}'"),
    ("env MASTER_KEY", f"MEILI_MASTER_KEY: {body(24)}", f"MEILI_MASTER_KEY: {R('secret')}"),
    ("rails secret_key_base", f"secret_key_base={hexs(128)}", f"secret_key_base={R('secret')}"),
    ("azure sas url", "https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&ss=b&sp=r"
     f"&se=2026-01-01T00:00:00Z&sig={body(43)}%3D",
     "https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&ss=b&sp=r"
     f"&se=2026-01-01T00:00:00Z&sig={R('azure_sas')}"),
    ("azure client secret", f"client secret is {body(3)}8{'Q~'}{body(34)} now",
     f"client secret is {R('azure')} now"),
    ("azure service bus key", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName="
     f"RootManageSharedAccessKey;SharedAccessKey={body(43)}=",
     "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName="
     f"RootManageSharedAccessKey;SharedAccessKey={R('secret')}"),
    ("storage access_key", f"access_key = {body(40)}", f"access_key = {R('secret')}"),
    ("kubeconfig client-key-data", "client-key-data: " + base64.b64encode(
        PEM.encode()).decode(), f"client-key-data: {R('base64')}"),
    ("base64 of a stripe key", "STRIPE=" + base64.b64encode(
        f"{'sk'}_live_{body(24)}".encode()).decode(), f"STRIPE={R('base64')}"),
    ("docker config auth", '{"auths": {"ghcr.io": {"auth": "' + base64.b64encode(
        b"bob:" + body(20).encode()).decode() + '"}}}',
     '{"auths": {"ghcr.io": {"auth": "' + R("credential") + '"}}}'),
    ("shopify", f"{'shp'}at_{hexs(32)}", R("shopify")),
    ("vault", f"VAULT_TOKEN is {'hv'}s.{body(90)}", f"VAULT_TOKEN is {R('vault')}"),
    ("digitalocean", f"{'do'}p_v1_{HEX64}", R("digitalocean")),
    ("discord bot", f"bot {'MT'}{body(24)}.{body(6)}.{body(38)} online",
     f"bot {R('discord')} online"),
    ("pwd all letters", "user: bob\npwd: correcthorse\n", f"user: bob\npwd: {R('password')}\n"),
    ("config password all letters", "db_password: correcthorsebattery",
     f"db_password: {R('password')}"),
    ("telegram", f"bot {'12345678'}9:AA{body(33)}", f"bot {R('telegram')}"),
    ("age key", f"{'AGE-SECRET'}-KEY-1{body(58, 'QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L')}",
     R("age")),
    ("sentry", f"{'sntrys'}_{body(60)}", R("sentry")),
    ("databricks", f"host=x {'dapi'}{hexs(32)}", f"host=x {R('databricks')}"),
    ("atlassian", f"{'ATATT3'}{body(186)}", R("atlassian")),
    ("linear", f"{'lin_api'}_{body(40)}", R("linear")),
    ("postman", f"{'PMAK'}-{hexs(24)}-{hexs(34)}", R("postman")),
    ("doppler", f"{'dp.pt'}.{body(43)}", R("doppler")),
    ("grafana", f"{'glsa'}_{body(32)}_{hexs(8)}", R("grafana")),
    ("new relic", f"{'NRAK'}-{UPPER}{UPPER[:11]}", R("newrelic")),
    ("mailgun", f"api:{'key'}-{hexs(32)}", f"api:{R('mailgun')}"),
    ("square", f"{'sq0csp'}-{body(43)}", R("square")),
    ("heroku", f"{'HRKU'}-{body(60)}", R("heroku")),
    ("netrc", f"machine api.example.com login bob password {body(12)}\n",
     f"machine api.example.com login bob password {R('password')}\n"),
    ("authorization bot", f"Authorization: Bot {body(40)}",
     f"Authorization: Bot {R('authorization')}"),
    ("okta ssws", f"Authorization: SSWS {body(42)}", f"Authorization: SSWS {R('authorization')}"),
]

# Look-alikes of the new shapes: none may change.
NOT_SECRETS = [
    "We bypass=true the cache and set compass=north.",
    "Boarding pass: 12A and pass: the ball",
    "the signature sig=short is fine",
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t is a base64 certificate header",
    base64.b64encode(b"-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n").decode(),
    "shipping and shopify_store and hvs.short and dop_v1_short",
    "www.example.com.au and v1.2.3.4 and a.b.c",
    "key-value stores and master branch and app_key_count: 3",
    "pwd: /home/bob/project",
    "db_password: null",
    "encryption: AES-256 and storage: 20 GB",
    '{"author": "Ada", "auth": {"type": "none"}}',
    "login bob and then password reset",
    "Authorization: required for this endpoint",
]


@pytest.mark.parametrize("text,expected", [(t, e) for _, t, e in MISSED_BEFORE],
                         ids=[name for name, _, _ in MISSED_BEFORE])
def test_shapes_missed_before_are_redacted(text, expected):
    assert redact_text(text) == expected
    assert redact_text(expected) == expected
    assert might_hold_secret(text)


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_look_alikes_of_the_new_shapes_are_untouched(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("key", ["pass", "db_pass", "dbPass", "DB_PASS", "access_key",
                                 "AccountKey", "encryption_key", "signingKey", "master_key"])
def test_values_under_the_new_secret_keys_are_redacted(key):
    value = redact({"config": {key: "plain words", "host": "db"}})
    assert value["config"]["host"] == "db" and "plain" not in value["config"][key]


@pytest.mark.parametrize("key", ["bypass", "compass", "passes", "access_key_id", "keys"])
def test_keys_that_only_look_like_the_new_ones_keep_their_values(key):
    assert redact({key: "plain words"}) == {key: "plain words"}


@pytest.mark.parametrize("text", [t for _, t, _ in POSITIVE + MISSED_BEFORE] + NOT_SECRETS,
                         ids=[n for n, _, _ in POSITIVE + MISSED_BEFORE] + NOT_SECRETS)
def test_long_text_is_redacted_exactly_as_short_text(text):
    # Past SHORT_SCAN each branch is searched on its own and merged: the same matches.
    from tickwork.worker.secret_shapes import SHORT_SCAN

    filler = "Record 7 is a ticket opened on day 8; priority 4.\n" * (SHORT_SCAN // 40)
    long = f"{filler}{text} {text}\n{filler}"
    assert len(long) > SHORT_SCAN
    short = redact_text(f"{text} {text}\n")
    assert redact_text(long) == f"{filler}{short}{filler}"
