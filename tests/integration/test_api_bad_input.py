"""Bad input (RELIABILITY 3.5, V1-V6 and V10): every refusal is a documented 4xx with a
machine-readable code and a sentence, nothing is stored, nothing that existed changes, no 5xx,
and the process still answers afterwards.

All cases share one database per module, seeded with an agent, a schedule and two runs: the
cases are refusals, so sharing is sound, and it makes "nothing lost" checkable because every
refusal is made against existing rows. "Nothing changed" is a fingerprint of every table in the
public schema (row count + content hash) plus the schema's own column list, taken before and
after each request.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from urllib.parse import quote

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.integration.api_checks import check_response, fetch, fingerprint

MISSING = "0190a000-0000-7000-8000-000000000000"
LIMIT = 1024 * 1024


# --- the shared world --------------------------------------------------------------------------

@pytest.fixture(scope="module")
async def world(pg_server_url, template_db):
    from tickwork.scheduler.api.app import create_app
    from tickwork.scheduler.settings import SchedulerSettings
    from tickwork.scheduler.tokens import create_token
    from tickwork.sql.db import open_pool

    name = f"tickwork_badinput_{os.getpid()}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {template_db}")
        admin.execute(f"ALTER DATABASE {name} SET idle_in_transaction_session_timeout = '2s'")
    db_url = make_conninfo(pg_server_url, dbname=name)
    pool = await open_pool(db_url, application_name="tickwork-test", max_size=8)
    async with pool.connection() as conn:
        token = await create_token(conn, tenant="acme", admin=True)
        operator = await create_token(conn, operator=True)  # the tick is the operator's
    app = create_app(SchedulerSettings(test_mode=True), pool=pool)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                               base_url="http://tickwork.test",
                               headers={"Authorization": f"Bearer {token}"},
                               event_hooks={"response": [check_response]})
    agent = (await client.post("/v1/agents", json={
        "name": "seeded", "instructions": "Seeded.", "tools": ["demo.get_record"]})).json()
    schedule = (await client.post("/v1/schedules", json={
        "agent_id": agent["id"], "cron": "0 9 * * *", "input": {"seeded": True}})).json()
    run = (await client.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}})).json()
    manual = (await client.post(f"/v1/schedules/{schedule['id']}/run-now")).json()
    try:
        yield SimpleNamespace(api=client, db_url=db_url, pool=pool, token=token, agent=agent,
                              as_operator={"Authorization": f"Bearer {operator}"},
                              schedule=schedule, run=run, manual=manual)
    finally:
        await client.aclose()
        await pool.close()
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def refused(world, method: str, url: str, status: int, code: str | None = None,
                  field: str | None = None, **request) -> dict:
    """Send a request that must be refused; assert the refusal and that nothing changed."""
    before = await fingerprint(world.db_url)
    response = await world.api.request(method, url, **request)
    assert response.status_code == status, (method, url, response.status_code, response.text)
    body = response.json()
    if code is not None:
        assert body["error"] == code, body
    if field is not None:
        assert body.get("field") == field, body
    assert await fingerprint(world.db_url) == before, f"{method} {url} changed the database"
    assert (await world.api.get("/healthz")).status_code == 200
    return body


def schedule_body(world, **fields) -> dict:
    return {"agent_id": world.agent["id"], **fields}


# --- V1: malformed crons -----------------------------------------------------------------------

BAD_CRONS = {
    "empty": "",
    "three_fields": "* * *",
    "minute_61": "61 * * * *",
    "hour_24": "* 24 * * *",
    "step_zero": "*/0 * * * *",
    "letters": "a b c d e",
    "at_reboot": "@reboot",
    "at_every": "@every 5m",
    "at_hourly": "@hourly",
    "six_fields_seconds": "0 0 9 * * *",
    "seven_fields": "0 0 9 * * * 2026",
    "ten_thousand_chars": "1" * 10_000,
    "arabic_indic_digit": "\u0661 * * * *",
    "nul_inside": "0 9 * * *\x00",
    "nul_between_fields": "0\x009 * * *",
    "trailing_newline": "* * * * *\n",
    "leading_space": " * * * * *",
    "double_space": "*  * * * *",
    "tab_separated": "0\t9\t*\t*\t*",
    "weekday_8": "0 9 * * 8",
    "month_13": "0 9 1 13 *",
    "day_0": "0 9 0 * *",
    "negative": "-1 * * * *",
    "fullwidth_star": "\uff0a * * * *",
}


@pytest.mark.parametrize("expression", list(BAD_CRONS.values()), ids=list(BAD_CRONS))
async def test_a_malformed_cron_is_422_invalid_cron_on_field_cron(world, expression):
    await refused(world, "POST", "/v1/schedules", 422, "invalid_cron", "cron",
                  json=schedule_body(world, cron=expression))


@pytest.mark.parametrize("cron_value", [None, 5, ["0", "9", "*", "*", "*"], {"minute": 0}])
async def test_a_cron_that_is_not_a_string_is_refused(world, cron_value):
    await refused(world, "POST", "/v1/schedules", 422, field="cron",
                  json=schedule_body(world, cron=cron_value))


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"])
async def test_a_cron_that_never_fires_is_422_cron_never_fires(world, expression):
    await refused(world, "POST", "/v1/schedules", 422, "cron_never_fires", "cron",
                  json=schedule_body(world, cron=expression))


async def test_a_cron_that_fires_only_in_leap_years_is_accepted(world):
    response = await world.api.post("/v1/schedules", json=schedule_body(world, cron="0 0 29 2 *"))

    assert response.status_code == 201, response.text
    assert response.json()["next_run"].endswith("-02-29T00:00:00Z")
    assert (await world.api.delete(f"/v1/schedules/{response.json()['id']}")).status_code == 204


# --- V2: anything timezone-bearing -------------------------------------------------------------

ZONED_CRONS = {
    "cron_tz_prefix": "CRON_TZ=Europe/Berlin 0 9 * * *",
    "tz_prefix": "TZ=UTC * * * * *",
    "lowercase_tz_prefix": "tz=America/New_York 30 8 * * 1-5",
}


@pytest.mark.parametrize("expression", list(ZONED_CRONS.values()), ids=list(ZONED_CRONS))
async def test_a_zone_prefixed_cron_is_422_timezone_not_allowed(world, expression):
    body = await refused(world, "POST", "/v1/schedules", 422, "timezone_not_allowed", "cron",
                         json=schedule_body(world, cron=expression))
    assert "UTC" in body["message"]


ZONED_BODIES = {
    "timezone_key": ("POST", "/v1/schedules", {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}),
    "tz_key": ("POST", "/v1/schedules", {"cron": "0 9 * * *", "tz": "UTC"}),
    "capitalised_key": ("POST", "/v1/schedules", {"cron": "0 9 * * *", "TimeZone": "UTC"}),
    "display_timezone": ("POST", "/v1/schedules", {
        "cron": "0 9 * * *",
        "display": {"frequency": "daily", "time_of_day": "09:00", "timezone": "Europe/Berlin"}}),
    "patch_timezone": ("PATCH", "/v1/schedules/{schedule}", {"timezone": "Europe/Berlin"}),
    "run_tz": ("POST", "/v1/agents/{agent}/runs", {"input": {}, "tz": "Europe/Berlin"}),
}


@pytest.mark.parametrize("case", list(ZONED_BODIES.values()), ids=list(ZONED_BODIES))
async def test_a_zone_key_in_a_body_is_422_timezone_not_allowed(world, case):
    method, url, body = case
    if url == "/v1/schedules":
        body = schedule_body(world, **body)
    url = url.format(schedule=world.schedule["id"], agent=world.agent["id"])
    await refused(world, method, url, 422, "timezone_not_allowed", json=body)


@pytest.mark.parametrize("at", [
    "2026-03-29T02:30:00+02:00",
    "2026-03-29T02:30:00+00:00",
    "2026-03-29T02:30:00-05:00",
    "2026-03-29T02:30:00",
    "2026-03-29 02:30:00",
    "2026-03-29T02:30:00+02:00Z",
])
async def test_a_tick_time_with_an_offset_or_without_a_zone_is_422_timezone_not_allowed(world, at):
    await refused(world, "POST", "/v1/tick", 422, "timezone_not_allowed", "at", json={"at": at},
                  headers=world.as_operator)


@pytest.mark.parametrize("at", ["yesterday", "2026-13-01T00:00:00Z", "", "Z"])
async def test_a_tick_time_that_is_not_a_time_is_422(world, at):
    await refused(world, "POST", "/v1/tick", 422, field="at", json={"at": at},
                  headers=world.as_operator)


async def test_a_tick_time_in_utc_with_a_z_is_accepted_in_test_mode(world):
    response = await world.api.post("/v1/tick", json={"at": "2026-03-29T02:30:00Z"},
                                    headers=world.as_operator)

    assert response.status_code == 200, response.text
    assert response.json()["ok"] is True


async def test_a_tick_time_outside_test_mode_is_422_test_mode_only(world):
    from tickwork.scheduler.api.app import create_app
    from tickwork.scheduler.settings import SchedulerSettings

    production = create_app(SchedulerSettings(test_mode=False), pool=world.pool)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=production),
                                 base_url="http://tickwork.test",
                                 headers=world.as_operator,
                                 event_hooks={"response": [check_response]}) as client:
        before = await fingerprint(world.db_url)
        response = await client.post("/v1/tick", json={"at": "2026-03-29T02:30:00Z"})

    assert response.status_code == 422, response.text
    assert (response.json()["error"], response.json()["field"]) == ("test_mode_only", "at")
    assert await fingerprint(world.db_url) == before


# --- V3: timeouts ------------------------------------------------------------------------------

BAD_TIMEOUTS = {"zero": 0, "sixteen": 16, "minus_one": -1, "fraction": 1.5, "string": "5",
                "null": None, "boolean": True,
                "huge": 10**20}


@pytest.mark.parametrize("timeout", list(BAD_TIMEOUTS.values()), ids=list(BAD_TIMEOUTS))
async def test_a_schedule_timeout_outside_1_to_15_whole_minutes_is_422(world, timeout):
    await refused(world, "POST", "/v1/schedules", 422, field="timeout_minutes",
                  json=schedule_body(world, cron="0 10 * * *", timeout_minutes=timeout))


@pytest.mark.parametrize("timeout", list(BAD_TIMEOUTS.values()), ids=list(BAD_TIMEOUTS))
async def test_a_run_timeout_outside_1_to_15_whole_minutes_is_422(world, timeout):
    await refused(world, "POST", f"/v1/agents/{world.agent['id']}/runs", 422,
                  field="timeout_minutes", json={"input": {}, "timeout_minutes": timeout})


@pytest.mark.parametrize("timeout", [0, 16, -1, 1.5, "5"])
async def test_patching_a_timeout_outside_1_to_15_whole_minutes_is_422(world, timeout):
    await refused(world, "PATCH", f"/v1/schedules/{world.schedule['id']}", 422,
                  field="timeout_minutes", json={"timeout_minutes": timeout})


@pytest.mark.parametrize("url", ["/v1/schedules", "/v1/agents/{agent}/runs"])
async def test_a_timeout_of_1e309_is_422(world, url):
    raw = ('{"agent_id": "%s", "cron": "0 10 * * *", "timeout_minutes": 1e309}' % world.agent["id"]
           if url == "/v1/schedules" else '{"input": {}, "timeout_minutes": 1e309}')
    await refused(world, "POST", url.format(agent=world.agent["id"]), 422,
                  field="timeout_minutes", content=raw,
                  headers={"Content-Type": "application/json"})


async def test_a_missing_timeout_defaults_to_5_minutes(world):
    schedule = await world.api.post("/v1/schedules", json=schedule_body(world, cron="0 11 * * *"))
    run = await world.api.post(f"/v1/agents/{world.agent['id']}/runs", json={"input": {}})

    assert schedule.json()["timeout_minutes"] == 5
    assert run.json()["timeout_minutes"] == 5
    assert await fetch(world.db_url, "SELECT timeout_minutes FROM executions WHERE id = %s",
                       (run.json()["id"],)) == [(5,)]
    await world.api.delete(f"/v1/schedules/{schedule.json()['id']}")


@pytest.mark.parametrize("timeout", [1, 15])
async def test_timeouts_of_1_and_15_minutes_are_accepted(world, timeout):
    response = await world.api.post(f"/v1/agents/{world.agent['id']}/runs",
                                    json={"input": {}, "timeout_minutes": timeout})

    assert response.status_code == 202, response.text
    assert response.json()["timeout_minutes"] == timeout


# --- V4: size, depth, duplicate keys -----------------------------------------------------------

def agent_body_of_size(size: int) -> bytes:
    """A valid JSON agent body of exactly ``size`` bytes."""
    head, tail = b'{"name": "big", "instructions": "', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def test_a_body_one_byte_over_the_limit_is_413(world):
    body = agent_body_of_size(LIMIT + 1)
    assert len(body) == LIMIT + 1
    await refused(world, "POST", "/v1/agents", 413, "body_too_large", content=body,
                  headers={"Content-Type": "application/json"})


async def test_a_body_ten_times_the_limit_is_413(world):
    await refused(world, "POST", "/v1/agents", 413, "body_too_large",
                  content=agent_body_of_size(10 * LIMIT),
                  headers={"Content-Type": "application/json"})


async def test_a_chunked_body_over_the_limit_without_a_length_is_413(world):
    async def chunks():
        body = agent_body_of_size(2 * LIMIT)
        for start in range(0, len(body), 64 * 1024):
            yield body[start:start + 64 * 1024]

    await refused(world, "POST", "/v1/agents", 413, "body_too_large", content=chunks(),
                  headers={"Content-Type": "application/json"})


async def test_a_body_of_exactly_the_limit_is_read_and_judged_on_its_content(world):
    body = agent_body_of_size(LIMIT)
    await refused(world, "POST", "/v1/agents", 422, "instructions_too_long", content=body,
                  headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("depth", [33, 10_000, 100_000])
async def test_json_nested_too_deep_is_400(world, depth):
    nested = "[" * depth + "]" * depth
    body = '{"agent_id": "%s", "cron": "0 12 * * *", "input": {"x": %s}}' % (
        world.agent["id"], nested)
    await refused(world, "POST", "/v1/schedules", 400, content=body,
                  headers={"Content-Type": "application/json"})


async def test_json_nested_within_the_limit_is_accepted(world):
    nested = {"x": 1}
    for _ in range(20):
        nested = {"x": nested}
    response = await world.api.post(f"/v1/agents/{world.agent['id']}/runs",
                                    json={"input": nested})

    assert response.status_code == 202, response.text
    assert response.json()["input"] == nested


@pytest.mark.parametrize("raw", [
    '{"name": "one", "name": "two"}',
    '{"name": "one", "instructions": "a", "instructions": "b"}',
    '{"name": "one", "tools": [], "status": "draft", "status": "active"}',
], ids=["name", "instructions", "status"])
async def test_duplicate_keys_in_a_body_are_400(world, raw):
    await refused(world, "POST", "/v1/agents", 400, "duplicate_key", content=raw,
                  headers={"Content-Type": "application/json"})


async def test_duplicate_keys_nested_in_input_are_400(world):
    raw = '{"input": {"script": 1, "script": 2}}'
    await refused(world, "POST", f"/v1/agents/{world.agent['id']}/runs", 400, "duplicate_key",
                  content=raw, headers={"Content-Type": "application/json"})


async def test_a_body_with_100000_keys_is_refused(world):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    keys = ",".join(f'"{digits[n // 36**3 % 36]}{digits[n // 36**2 % 36]}{digits[n // 36 % 36]}'
                    f'{digits[n % 36]}":0' for n in range(100_000))
    raw = '{"name": "many", %s}' % keys
    assert len(raw) < LIMIT
    await refused(world, "POST", "/v1/agents", 422, content=raw,
                  headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("raw", ["{", "not json", '{"name": "a",}', "[1, 2", "{\"name\": nul}",
                                 b'{"name": "\xff\xfe"}'], ids=range(6))
async def test_a_body_that_is_not_json_is_400(world, raw):
    await refused(world, "POST", "/v1/agents", 400, content=raw,
                  headers={"Content-Type": "application/json"})


NON_JSON_NUMBERS = {"nan": "NaN", "infinity": "Infinity", "minus_infinity": "-Infinity",
                    "overflow": "1e309"}


@pytest.mark.parametrize("number", list(NON_JSON_NUMBERS.values()), ids=list(NON_JSON_NUMBERS))
async def test_a_number_json_cannot_carry_inside_run_input_is_refused(world, number):
    raw = '{"input": {"x": %s}}' % number
    await refused(world, "POST", f"/v1/agents/{world.agent['id']}/runs", 422, content=raw,
                  headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("number", list(NON_JSON_NUMBERS.values()), ids=list(NON_JSON_NUMBERS))
async def test_a_number_json_cannot_carry_inside_schedule_input_is_refused(world, number):
    raw = '{"agent_id": "%s", "cron": "0 14 * * *", "input": {"x": %s}}' % (
        world.agent["id"], number)
    await refused(world, "POST", "/v1/schedules", 422, content=raw,
                  headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("raw", ['"just a string"', "[]", "42", "null"])
async def test_a_json_body_that_is_not_an_object_is_422(world, raw):
    await refused(world, "POST", "/v1/agents", 422, content=raw,
                  headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("text", ["\x00", "a\x00b", "\ud800"], ids=["nul", "inner_nul",
                                                                      "lone_surrogate"])
async def test_text_postgres_cannot_store_is_422(world, text):
    import json

    raw = json.dumps({"name": "x", "instructions": text})  # escapes: \u0000, \ud800
    await refused(world, "POST", "/v1/agents", 422, content=raw,
                  headers={"Content-Type": "application/json"})


# --- V5: path ids ------------------------------------------------------------------------------

ID_ROUTES = {
    "get_agent": ("GET", "/v1/agents/{id}", None),
    "put_agent": ("PUT", "/v1/agents/{id}", {"name": "renamed"}),
    "delete_agent": ("DELETE", "/v1/agents/{id}", None),
    "run_agent": ("POST", "/v1/agents/{id}/runs", {"input": {}}),
    "get_schedule": ("GET", "/v1/schedules/{id}", None),
    "patch_schedule": ("PATCH", "/v1/schedules/{id}", {"status": "paused"}),
    "delete_schedule": ("DELETE", "/v1/schedules/{id}", None),
    "run_now": ("POST", "/v1/schedules/{id}/run-now", None),
    "history": ("GET", "/v1/schedules/{id}/history", None),
    "get_run": ("GET", "/v1/runs/{id}", None),
}
MALFORMED_IDS = {
    "not_a_uuid": "not-a-uuid",
    "37_chars": "00000000-0000-0000-0000-0000000000000",
    "35_chars": "00000000-0000-0000-0000-00000000000",
    "g_digit": "00000000-0000-0000-0000-00000000000g",
    "sql_or": "1' OR '1'='1",
    "sql_drop": "'; DROP TABLE executions;--",
    "nul": "\x00",
    "uuid_then_nul": MISSING + "\x00",
    "uuid_with_suffix": MISSING + "x",
    "unicode_digits": "\u0661" * 32,
}


def id_route_cases():
    for route_name, route in ID_ROUTES.items():
        for id_name, bad in MALFORMED_IDS.items():
            yield pytest.param(route, bad, id=f"{route_name}-{id_name}")


@pytest.mark.parametrize("route,bad_id", list(id_route_cases()))
async def test_a_malformed_path_id_is_refused_as_bad_input_never_500(world, route, bad_id):
    method, template, body = route
    url = template.replace("{id}", quote(bad_id, safe=""))
    before = await fingerprint(world.db_url)

    response = await world.api.request(method, url, **({"json": body} if body else {}))

    assert response.status_code in (400, 422), (url, response.status_code, response.text)
    assert await fingerprint(world.db_url) == before


@pytest.mark.parametrize("route", list(ID_ROUTES.values()), ids=list(ID_ROUTES))
@pytest.mark.parametrize("unknown", [MISSING, MISSING.upper()], ids=["lower", "upper"])
async def test_a_well_formed_unknown_path_id_is_404_not_found(world, route, unknown):
    method, template, body = route
    await refused(world, method, template.replace("{id}", unknown), 404, "not_found",
                  **({"json": body} if body else {}))


# --- V6: hostile strings are data --------------------------------------------------------------

def unicode_of_bytes(size: int) -> str:
    piece = "Ωμέγα ✓ 日本語 🎉 \u202e ' \\ $$ \U0001d11e "
    text = ""
    while len(text.encode()) < size:
        text += piece
    while len(text.encode()) > size:
        text = text[:-1]
    return text


HOSTILE = {
    "sql_drop": "'; DROP TABLE executions;--",
    "sql_or": "' OR '1'='1",
    "dollar_quotes": "$$",
    "dollar_body": "$$; DROP TABLE agents; $$",
    "backslash": "\\",
    "backslashes": "C:\\new\\table\\x00\\\\",
    "percent_nul": "%00",
    "rtl_override": "invoice\u202efdp.exe",
    "escaped_nul_text": "\\u0000",
    "quotes": "\"'`",
    "zwj_emoji": "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "combining": "e\u0301 vs \u00e9",
    "unicode_64k": unicode_of_bytes(64 * 1024),
    "astral_64k": "\U0001d11e" * 16_384,
}


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_hostile_text_is_stored_and_returned_byte_identical(world, text):
    api = world.api
    name = text if len(text) <= 200 else f"long-{len(text)}-{text[:8].encode().hex()}"
    instructions = text if len(text) <= 16_384 else "short"
    created = await api.post("/v1/agents", json={"name": name, "instructions": instructions})
    assert created.status_code == 201, created.text
    agent = created.json()
    assert (agent["name"], agent["instructions"]) == (name, instructions)
    assert (await api.get(f"/v1/agents/{agent['id']}")).json() == agent
    listed = (await api.get("/v1/agents", params={"name": name})).json()["items"]
    assert [item["id"] for item in listed] == [agent["id"]]
    assert await fetch(world.db_url, "SELECT name, instructions FROM agents WHERE id = %s",
                       (agent["id"],)) == [(name, instructions)]

    run_input = {"text": text, text: "as a key", "list": [text, {"nested": text}]}
    created = await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": "0 9 * * *",
                                                    "input": run_input})
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert schedule["input"] == run_input
    assert (await api.get(f"/v1/schedules/{schedule['id']}")).json()["input"] == run_input
    assert await fetch(world.db_url, "SELECT input->>'text' FROM schedules WHERE id = %s",
                       (schedule["id"],)) == [(text,)]
    run = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()
    assert (await api.get(f"/v1/runs/{run['id']}")).json()["input"] == run_input
    assert await fetch(world.db_url, "SELECT input->'list'->1->>'nested' FROM executions"
                                     " WHERE id = %s", (run["id"],)) == [(text,)]
    assert await fetch(world.db_url, "SELECT count(*) FROM executions") != [(0,)]


async def test_a_64k_name_is_422_and_nothing_is_stored(world):
    await refused(world, "POST", "/v1/agents", 422, field="name",
                  json={"name": HOSTILE["unicode_64k"]})


async def test_a_64k_instructions_of_more_than_16384_characters_are_422(world):
    await refused(world, "POST", "/v1/agents", 422, "instructions_too_long",
                  json={"name": "verbose", "instructions": HOSTILE["unicode_64k"]})


@pytest.mark.parametrize("text", [HOSTILE[k] for k in ("sql_drop", "sql_or", "dollar_quotes",
                                                      "backslash", "percent_nul", "quotes")],
                         ids=["sql_drop", "sql_or", "dollar_quotes", "backslash", "percent_nul",
                              "quotes"])
async def test_a_hostile_idempotency_key_is_stored_as_given(world, text):
    key = f"{text}-{os.urandom(4).hex()}"
    response = await world.api.post(f"/v1/agents/{world.agent['id']}/runs", json={"input": {}},
                                    headers={"Idempotency-Key": key})

    assert response.status_code == 202, response.text
    assert await fetch(world.db_url, "SELECT idempotency_key FROM executions WHERE id = %s",
                       (response.json()["id"],)) == [(key,)]


HOSTILE_QUERIES = {
    "cursor_sql": ("/v1/agents", {"cursor": "'; DROP TABLE executions;--"}),
    "cursor_or": ("/v1/runs", {"cursor": "' OR '1'='1"}),
    "cursor_nul": ("/v1/schedules", {"cursor": "\x00"}),
    "cursor_unicode": ("/v1/runs", {"cursor": "\u202e\u0661"}),
    "cursor_short_base64": ("/v1/runs", {"cursor": "AAAA"}),
    "limit_sql": ("/v1/agents", {"limit": "1; DROP TABLE agents"}),
    "limit_float": ("/v1/runs", {"limit": "1.5"}),
    "agent_id_sql": ("/v1/runs", {"agent_id": "' OR '1'='1"}),
    "schedule_id_sql": ("/v1/runs", {"schedule_id": "$$"}),
    "status_sql": ("/v1/runs", {"status": "queued' OR '1'='1"}),
    "schedules_agent_id": ("/v1/schedules", {"agent_id": "'; DROP TABLE executions;--"}),
    "history_limit": ("/v1/schedules/{schedule}/history", {"limit": "-1"}),
}


@pytest.mark.parametrize("case", list(HOSTILE_QUERIES.values()), ids=list(HOSTILE_QUERIES))
async def test_a_hostile_query_parameter_is_422(world, case):
    url, params = case
    await refused(world, "GET", url.format(schedule=world.schedule["id"]), 422, params=params)


@pytest.mark.parametrize("name", ["\x00", "a\x00b"], ids=["nul", "inner_nul"])
async def test_a_nul_in_the_name_filter_is_422_not_a_database_error(world, name):
    await refused(world, "GET", "/v1/agents", 422, params={"name": name})


@pytest.mark.parametrize("key", ["\x00", "a\x00b"], ids=["nul", "inner_nul"])
async def test_a_nul_in_the_idempotency_key_is_422_not_a_database_error(world, key):
    await refused(world, "POST", f"/v1/agents/{world.agent['id']}/runs", 422,
                  json={"input": {}}, headers={"Idempotency-Key": key})


async def test_an_idempotency_key_longer_than_200_characters_is_422(world):
    await refused(world, "POST", f"/v1/agents/{world.agent['id']}/runs", 422,
                  json={"input": {}}, headers={"Idempotency-Key": "k" * 201})


async def test_a_hostile_name_filter_finds_nothing_and_changes_nothing(world):
    before = await fingerprint(world.db_url)
    for text in ("x' OR '1'='1", "x'; DROP TABLE executions;--", "' OR 1=1 --", "%", "_", "*",
                 "seeded' --", "SEEDED"):
        response = await world.api.get("/v1/agents", params={"name": text})
        assert response.json() == {"items": [], "next_cursor": None}, text
    assert await fingerprint(world.db_url) == before


# --- V10: content type and unknown fields ------------------------------------------------------

@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/xml", "application/jsonx", None,
], ids=["text", "form", "multipart", "xml", "jsonx", "missing"])
async def test_a_json_body_sent_with_the_wrong_content_type_is_415(world, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    request = world.api.build_request("POST", "/v1/agents", content=b'{"name": "typed"}',
                                      headers=headers)
    if content_type is None:
        request.headers.pop("Content-Type", None)
    before = await fingerprint(world.db_url)

    response = await world.api.send(request)

    assert response.status_code == 415, response.text
    assert response.json()["error"] == "unsupported_media_type"
    assert await fingerprint(world.db_url) == before


async def test_json_with_a_charset_parameter_is_accepted(world):
    response = await world.api.post("/v1/agents", content=b'{"name": "charset"}',
                                    headers={"Content-Type": "application/json; charset=utf-8"})

    assert response.status_code == 201, response.text


UNKNOWN_FIELDS = {
    "agent_create": ("POST", "/v1/agents", {"name": "x", "colour": "red"}),
    "agent_temperature": ("POST", "/v1/agents", {"name": "x", "temperature": 0.2}),
    "agent_put": ("PUT", "/v1/agents/{agent}", {"name": "seeded", "extra": 1}),
    "schedule_create": ("POST", "/v1/schedules", {"cron": "0 13 * * *", "priority": 1}),
    "schedule_display": ("POST", "/v1/schedules", {
        "cron": "0 13 * * *", "display": {"frequency": "daily", "colour": "red"}}),
    "schedule_patch": ("PATCH", "/v1/schedules/{schedule}", {"status": "paused", "name": "x"}),
    "schedule_patch_agent": ("PATCH", "/v1/schedules/{schedule}", {"agent_id": MISSING}),
    "run": ("POST", "/v1/agents/{agent}/runs", {"input": {}, "priority": "high"}),
    "tick": ("POST", "/v1/tick", {"at": "2026-03-29T02:30:00Z", "force": True}),
    "run_now": ("POST", "/v1/schedules/{schedule}/run-now", {"input": {"override": True}}),
}


@pytest.mark.parametrize("case", list(UNKNOWN_FIELDS.values()), ids=list(UNKNOWN_FIELDS))
async def test_an_unknown_json_field_is_422(world, case):
    method, url, body = case
    if url == "/v1/schedules":
        body = schedule_body(world, **body)
    url = url.format(agent=world.agent["id"], schedule=world.schedule["id"])
    extra = {"headers": world.as_operator} if url == "/v1/tick" else {}
    await refused(world, method, url, 422, json=body, **extra)


async def test_an_unknown_route_is_a_404_json_error(world):
    await refused(world, "GET", "/v1/nothing-here", 404)
    await refused(world, "POST", "/v1/agents/../../v1/tick/../nope", 404, json={})


async def test_a_method_a_route_does_not_serve_is_a_405_json_error(world):
    await refused(world, "PATCH", f"/v1/agents/{world.agent['id']}", 405, json={"name": "x"})
    await refused(world, "DELETE", "/v1/runs", 405)


# --- afterwards --------------------------------------------------------------------------------

async def test_the_seeded_rows_survived_every_refusal(world):
    assert (await world.api.get(f"/v1/agents/{world.agent['id']}")).json() == world.agent
    assert (await world.api.get(f"/v1/schedules/{world.schedule['id']}")).json() == world.schedule
    assert (await world.api.get(f"/v1/runs/{world.run['id']}")).json() == world.run
    assert (await world.api.get(f"/v1/runs/{world.manual['id']}")).json() == world.manual
    assert (await world.api.get("/healthz")).json() == {"status": "ok"}
