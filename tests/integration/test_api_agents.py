"""The agents API: definitions a tenant writes, read back, lists, replaces and deletes.

Every response is checked by a hook: no 5xx, and every error body is JSON with a
machine-readable ``error`` and a ``message`` sentence. Refused writes are checked against a
fingerprint of every table in the public schema (row count and content hash).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from uuid import UUID

import psycopg
import pytest

from tests.factories import create_agent
from tests.integration.api_checks import fingerprint, assert_error, check_every_response


RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture(autouse=True)
def every_response_is_well_formed(api):
    check_every_response(api)


async def scalar(db_url: str, query: str, params: tuple = ()):
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        return (await (await conn.execute(query, params)).fetchone())[0]


def parse_z(text: str) -> datetime:
    assert RFC3339_Z.match(text), text
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


# --- create and read ---------------------------------------------------------------------------

async def test_creating_an_agent_returns_201_with_the_stored_definition(api):
    response = await api.post("/v1/agents", json={
        "name": "reporter", "instructions": "Summarise yesterday's tickets.",
        "tools": ["demo.get_record", "demo.send_message"], "auto_approve": ["demo.get_record"]})

    assert response.status_code == 201, response.text
    agent = response.json()
    UUID(agent["id"])
    assert agent["name"] == "reporter"
    assert agent["instructions"] == "Summarise yesterday's tickets."
    assert agent["tools"] == ["demo.get_record", "demo.send_message"]
    assert agent["auto_approve"] == ["demo.get_record"]
    assert agent["status"] == "active"
    assert RFC3339_Z.match(agent["created_at"]) and RFC3339_Z.match(agent["updated_at"])


async def test_an_agent_without_optional_fields_gets_the_defaults(api):
    agent = await create_agent(api, "bare")

    assert (agent["instructions"], agent["tools"], agent["auto_approve"], agent["status"]) == (
        "", [], [], "active")


async def test_an_agent_reads_back_exactly_as_created(api):
    created = await create_agent(api, "reporter", instructions="Be brief.", tools=["update_plan"],
                                 status="draft")

    response = await api.get(f"/v1/agents/{created['id']}")

    assert response.status_code == 200
    assert response.json() == created


async def test_an_unknown_agent_id_is_a_404_naming_the_id(api):
    missing = "0190a000-0000-7000-8000-000000000000"

    body = assert_error(await api.get(f"/v1/agents/{missing}"), 404, "not_found")

    assert missing in body["message"]


# --- list and pagination ---------------------------------------------------------------------

@pytest.mark.parametrize("total", [5, 4])
async def test_listing_agents_two_at_a_time_sees_each_agent_exactly_once(api, total):
    created = {(await create_agent(api, f"agent-{n}"))["id"] for n in range(total)}

    seen, pages, cursor = [], 0, None
    while True:
        params = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        response = await api.get("/v1/agents", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        pages += 1
        assert len(page["items"]) == (2 if len(seen) + 2 <= total else total - len(seen))
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert pages < 10, "pagination does not end"

    assert sorted(seen) == sorted(created)
    assert len(seen) == len(set(seen)) == total
    assert pages == (total + 1) // 2  # no trailing empty page


async def test_one_page_holding_everything_has_no_next_cursor(api):
    await create_agent(api, "only")

    page = (await api.get("/v1/agents", params={"limit": 50})).json()

    assert [item["name"] for item in page["items"]] == ["only"]
    assert page["next_cursor"] is None


async def test_listing_agents_with_no_agents_is_an_empty_page(api):
    assert (await api.get("/v1/agents")).json() == {"items": [], "next_cursor": None}


async def test_a_limit_outside_1_to_200_is_refused(api):
    for limit in (0, -1, 201, 10**30, "ten", ""):
        response = await api.get("/v1/agents", params={"limit": limit})
        assert response.status_code == 422, (limit, response.text)
        assert response.json()["field"] == "limit", (limit, response.text)
    for limit in (1, 200):
        assert (await api.get("/v1/agents", params={"limit": limit})).status_code == 200


async def test_a_cursor_the_api_never_gave_out_is_refused(api):
    assert_error(await api.get("/v1/agents", params={"cursor": "not a cursor!"}), 422,
                 "invalid_cursor")


# --- replace -----------------------------------------------------------------------------------

async def test_put_replaces_the_whole_definition_and_keeps_id_and_created_at(api):
    created = await create_agent(api, "reporter", instructions="old", tools=["demo.get_record"],
                                 auto_approve=["demo.get_record"])

    response = await api.put(f"/v1/agents/{created['id']}", json={
        "name": "writer", "instructions": "new", "tools": ["demo.send_message"],
        "status": "paused"})

    assert response.status_code == 200, response.text
    replaced = response.json()
    assert replaced["id"] == created["id"]
    assert replaced["created_at"] == created["created_at"]
    assert (replaced["name"], replaced["instructions"], replaced["tools"],
            replaced["auto_approve"], replaced["status"]) == (
        "writer", "new", ["demo.send_message"], [], "paused")
    assert parse_z(replaced["updated_at"]) >= parse_z(created["updated_at"])
    assert (await api.get(f"/v1/agents/{created['id']}")).json() == replaced


async def test_put_on_an_unknown_agent_is_a_404_and_creates_nothing(api, db_url):
    before = await fingerprint(db_url)

    assert_error(await api.put("/v1/agents/0190a000-0000-7000-8000-000000000000",
                               json={"name": "ghost"}), 404, "not_found")

    assert await fingerprint(db_url) == before


# --- delete ------------------------------------------------------------------------------------

async def test_delete_is_204_then_the_agent_is_gone(api):
    agent = await create_agent(api)

    response = await api.delete(f"/v1/agents/{agent['id']}")

    assert response.status_code == 204
    assert response.content == b""
    assert_error(await api.get(f"/v1/agents/{agent['id']}"), 404, "not_found")
    assert_error(await api.delete(f"/v1/agents/{agent['id']}"), 404, "not_found")
    assert (await api.get("/v1/agents")).json()["items"] == []


async def test_deleting_an_agent_removes_its_schedules_and_only_its_own(api, db_url):
    doomed = await create_agent(api, "doomed")
    kept = await create_agent(api, "kept")
    for agent, cron in ((doomed, "0 9 * * *"), (doomed, "0 17 * * *"), (kept, "0 9 * * *")):
        response = await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": cron})
        assert response.status_code == 201, response.text
    kept_schedule = (await api.get("/v1/schedules", params={"agent_id": kept["id"]})).json()
    run = (await api.post(f"/v1/agents/{doomed['id']}/runs", json={"input": {}})).json()

    assert (await api.delete(f"/v1/agents/{doomed['id']}")).status_code == 204

    listed = (await api.get("/v1/schedules")).json()
    assert listed == kept_schedule
    assert [item["agent_id"] for item in listed["items"]] == [kept["id"]]
    assert (await api.get("/v1/schedules", params={"agent_id": doomed["id"]})).json()["items"] == []
    assert await scalar(db_url, "SELECT count(*) FROM schedules WHERE agent_id = %s",
                        (doomed["id"],)) == 0
    assert await scalar(db_url, "SELECT count(*) FROM schedules") == 1
    # A run's history outlives its agent.
    assert (await api.get(f"/v1/runs/{run['id']}")).status_code == 200


# --- validation --------------------------------------------------------------------------------

async def test_unknown_tool_keys_are_a_400_naming_each_unknown_key_and_nothing_is_stored(api, db_url):
    before = await fingerprint(db_url)

    response = await api.post("/v1/agents", json={
        "name": "reporter", "tools": ["demo.get_record", "nope.alpha", "crm__beta"]})

    body = assert_error(response, 400, "unknown_tool")
    assert "nope.alpha" in body["message"] and "crm__beta" in body["message"]
    assert "demo.get_record" not in body["message"]
    assert await fingerprint(db_url) == before


async def test_replacing_an_agent_with_unknown_tool_keys_is_a_400_and_changes_nothing(api, db_url):
    agent = await create_agent(api, tools=["demo.get_record"])
    before = await fingerprint(db_url)

    response = await api.put(f"/v1/agents/{agent['id']}", json={
        "name": "reporter", "tools": ["vendor.missing"]})

    body = assert_error(response, 400, "unknown_tool")
    assert "vendor.missing" in body["message"]
    assert await fingerprint(db_url) == before
    assert (await api.get(f"/v1/agents/{agent['id']}")).json() == agent


async def test_every_published_tool_key_is_accepted(api):
    keys = ["demo.get_record", "demo.list_records", "demo.search_records", "demo.send_message",
            "update_plan", "task_complete", "read_file", "query_file"]

    agent = await create_agent(api, tools=keys)

    assert agent["tools"] == keys


async def test_auto_approve_outside_the_agents_tools_is_a_422_and_nothing_is_stored(api, db_url):
    before = await fingerprint(db_url)

    response = await api.post("/v1/agents", json={
        "name": "reporter", "tools": ["demo.get_record"],
        "auto_approve": ["demo.get_record", "demo.send_message"]})

    body = assert_error(response, 422)
    assert body.get("field") == "auto_approve"
    assert "demo.send_message" in body["message"]
    assert await fingerprint(db_url) == before


async def test_instructions_of_exactly_16384_characters_are_accepted(api, db_url):
    text = "x" * 16_383 + "\U0001d11e"  # the limit counts characters, not bytes

    agent = await create_agent(api, instructions=text)

    assert agent["instructions"] == text
    assert await scalar(db_url, "SELECT char_length(instructions) FROM agents") == 16_384


async def test_instructions_of_16385_characters_are_refused_and_nothing_is_stored(api, db_url):
    before = await fingerprint(db_url)

    response = await api.post("/v1/agents", json={"name": "reporter", "instructions": "x" * 16_385})

    body = assert_error(response, 422, "instructions_too_long")
    assert body.get("field") == "instructions"
    assert await fingerprint(db_url) == before


async def test_a_duplicate_name_is_a_409_and_nothing_is_stored(api, db_url):
    await create_agent(api, "reporter")
    before = await fingerprint(db_url)

    assert_error(await api.post("/v1/agents", json={"name": "reporter"}), 409)

    assert await fingerprint(db_url) == before


async def test_renaming_an_agent_onto_another_agents_name_is_a_409_and_changes_nothing(api, db_url):
    await create_agent(api, "first")
    second = await create_agent(api, "second")
    before = await fingerprint(db_url)

    assert_error(await api.put(f"/v1/agents/{second['id']}", json={"name": "first"}), 409)

    assert await fingerprint(db_url) == before


async def test_the_same_name_in_another_tenant_is_not_a_duplicate(api):
    await create_agent(api, "reporter")

    response = await api.post("/v1/agents", json={"name": "reporter"},
                              headers={"Authorization": f"Bearer {api.tokens['globex']}"})

    assert response.status_code == 201, response.text


MALFORMED_AGENT_BODIES = [
    {},
    {"name": ""},
    {"name": "n" * 201},
    {"name": 7},
    {"name": ["reporter"]},
    {"name": "reporter", "status": "archived"},
    {"name": "reporter", "tools": "demo.get_record"},
    {"name": "reporter", "tools": [""]},
    {"name": "reporter", "tools": [1]},
    {"name": "reporter", "instructions": None},
    {"name": "reporter", "model": 7},
    {"name": "reporter", "max_tool_calls": -1},
    {"name": "reporter", "schedule": "0 9 * * *"},
]


async def test_malformed_agent_bodies_are_422_and_store_nothing(api, db_url):
    before = await fingerprint(db_url)

    for body in MALFORMED_AGENT_BODIES:
        response = await api.post("/v1/agents", json=body)
        assert response.status_code == 422, (body, response.text)

    assert await fingerprint(db_url) == before
