"""`tickwork token create | list | revoke` as real processes against a real database, the
local admin token `tickwork up` keeps, and the compose path (token verbs run as the owner;
the API's role may not create tokens and says so in one sentence)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from datetime import timedelta

import httpx
import psycopg
import pytest

from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.sql.db import open_pool
from tests.integration.drivers import ROOT
from tests.integration.test_roles import granted  # noqa: F401 (a fixture)
from tickwork.local import TOKEN_FILE, local_admin_token

TICKWORK = [sys.executable, "-m", "tickwork.cli"]
TOKEN = re.compile(r"tw_[A-Za-z0-9_-]{43}")


def tickwork(db_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TICKWORK_DATABASE_URL": db_url, "COLUMNS": "200"}
    return subprocess.run([*TICKWORK, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def rows(db_url: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(query, params).fetchall()


def test_create_with_a_lifetime_and_an_operator_token(db_url):
    admin = tickwork(db_url, "token", "create", "--tenant", "acme", "--admin", "--expires-in", "30d")
    operator = tickwork(db_url, "token", "create", "--operator")

    assert admin.returncode == operator.returncode == 0, admin.stderr + operator.stderr
    assert TOKEN.fullmatch(admin.stdout.splitlines()[-1])
    assert TOKEN.fullmatch(operator.stdout.splitlines()[-1])
    assert rows(db_url, "SELECT n.name, t.is_admin, t.is_operator, t.expires_at - t.created_at"
                        " FROM api_tokens t LEFT JOIN tenants n ON n.id = t.tenant_id"
                        " ORDER BY t.created_at") == [
        ("acme", True, False, timedelta(days=30)),
        (None, False, True, None)]


@pytest.mark.parametrize("args, sentence", [
    (["--operator", "--tenant", "acme"], "without --tenant and --admin"),
    (["--operator", "--admin"], "without --tenant and --admin"),
    ([], "--tenant NAME (or --operator"),
    (["--tenant", "acme", "--expires-in", "30x"], "must be a number followed by m, h, d or w"),
    (["--tenant", "acme", "--expires-in", "0d"], "must be a number followed by m, h, d or w"),
    (["--tenant", "acme", "--expires-in", "9999w"], "longer than ten years"),
])
def test_create_refuses_bad_input_with_a_sentence_and_writes_nothing(db_url, args, sentence):
    done = tickwork(db_url, "token", "create", *args)

    assert done.returncode == 1
    assert sentence in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr
    assert rows(db_url, "SELECT count(*) FROM api_tokens") == [(0,)]
    assert rows(db_url, "SELECT count(*) FROM tenants") == [(0,)]


def test_list_json_is_one_document_without_any_token(db_url):
    made = [tickwork(db_url, "token", "create", *args).stdout.splitlines()[-1]
            for args in (["--tenant", "acme", "--admin"], ["--tenant", "globex"], ["--operator"])]

    everything = tickwork(db_url, "token", "list", "--json")
    acme = tickwork(db_url, "token", "list", "--tenant", "acme", "--json")
    table = tickwork(db_url, "token", "list")

    assert everything.returncode == acme.returncode == table.returncode == 0
    document = json.loads(everything.stdout)  # exactly one JSON document on stdout
    assert list(document) == ["items"]
    assert [(t["tenant"], t["admin"], t["operator"]) for t in document["items"]] == [
        ("acme", True, False), ("globex", False, False), (None, False, True)]
    assert [t["tenant"] for t in json.loads(acme.stdout)["items"]] == ["acme"]
    for token in made:
        assert token not in everything.stdout + table.stdout
    for item in document["items"]:
        assert item["id"] in table.stdout


def test_revoke_by_token_or_by_id(db_url):
    first = tickwork(db_url, "token", "create", "--tenant", "acme").stdout.splitlines()[-1]
    second = tickwork(db_url, "token", "create", "--tenant", "acme").stdout.splitlines()[-1]
    second_id = json.loads(tickwork(db_url, "token", "list", "--json").stdout)["items"][1]["id"]

    by_token = tickwork(db_url, "token", "revoke", first)
    by_id = tickwork(db_url, "token", "revoke", second_id)

    assert by_token.returncode == by_id.returncode == 0, by_token.stderr + by_id.stderr
    assert second_id in by_id.stdout
    assert rows(db_url, "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL") == [(0,)]
    assert second  # (both were real tokens)


@pytest.mark.parametrize("argument, sentence", [
    ("0190a000-0000-7000-8000-000000000000", "does not exist"),
    ("tw_" + "A" * 43, "does not exist"),
    ("acme", "neither a token (tw_…) nor a token id"),
])
def test_revoke_of_nothing_is_a_sentence_and_changes_nothing(db_url, argument, sentence):
    tickwork(db_url, "token", "create", "--tenant", "acme")

    done = tickwork(db_url, "token", "revoke", argument)

    assert done.returncode == 1 and sentence in done.stderr, done.stderr
    assert rows(db_url, "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL") == [(1,)]


def test_up_keeps_its_admin_token_0600_and_reuses_it_until_it_is_revoked(db_url, tmp_path):
    first = local_admin_token(db_url, tmp_path)
    again = local_admin_token(db_url, tmp_path)
    kept = tmp_path / TOKEN_FILE

    assert again == first
    assert kept.read_text().strip() == first
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert rows(db_url, "SELECT n.name, t.is_admin FROM api_tokens t JOIN tenants n"
                        " ON n.id = t.tenant_id") == [("local", True)]

    tickwork(db_url, "token", "revoke", first)
    replaced = local_admin_token(db_url, tmp_path)

    assert replaced != first and kept.read_text().strip() == replaced
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert rows(db_url, "SELECT count(*) FROM api_tokens") == [(2,)]


def test_the_api_role_may_not_create_tokens_and_is_told_to_use_the_owner(granted, db_url):  # noqa: F811
    done = tickwork(granted["tickwork_api"], "token", "create", "--tenant", "acme", "--admin")

    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "may not manage tenants and tokens" in message
    assert "docker compose run --rm migrate tickwork token" in message
    assert "Traceback" not in done.stderr
    assert rows(db_url, "SELECT count(*) FROM api_tokens") == [(0,)]


async def test_the_api_role_lists_revokes_and_stamps_last_use(granted, db_url, tokens):  # noqa: F811
    pool = await open_pool(granted["tickwork_api"], application_name="tickwork-api")
    app = create_app(SchedulerSettings(test_mode=True, auth_failure_limit=0), pool=pool)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://api.test") as api:
            operator = {"Authorization": f"Bearer {tokens['operator']}"}
            listed = (await api.get("/v1/tokens", headers=operator)).json()["items"]
            globex = next(t["id"] for t in listed if t["tenant"] == "globex")
            revoked = await api.delete(f"/v1/tokens/{globex}", headers=operator)
            after = await api.get("/v1/agents",
                                  headers={"Authorization": f"Bearer {tokens['globex']}"})
    finally:
        await stop_hub(app)
        await pool.close()
    assert revoked.status_code == 204 and after.status_code == 401
    assert rows(db_url, "SELECT last_used_at IS NOT NULL FROM api_tokens WHERE is_operator") \
        == [(True,)]
