"""The schedules API: one UTC cron per (agent, cron), next_run from the database clock,
pause/resume, run-now and the fire history.

``next_run`` is checked against an independent reference: a brute-force walk over minutes with
a plain Python predicate per cron, not tickwork's own cron evaluator.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from uuid import UUID

import pytest

from tests.factories import create_agent, create_schedule
from tests.integration.api_checks import fingerprint, fetch, assert_error, check_every_response


UTC = timezone.utc
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
MISSING = "0190a000-0000-7000-8000-000000000000"
TOOLS = ["demo.get_record"]  # the tools of every agent made here


@pytest.fixture(autouse=True)
def every_response_is_well_formed(api):
    check_every_response(api)


async def database_now(db_url: str) -> datetime:
    return (await fetch(db_url, "SELECT now()"))[0][0]


def parse_z(text: str) -> datetime:
    assert RFC3339_Z.match(text), text
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


# Independent reference crons: expression -> predicate over a UTC minute.
REFERENCE = {
    "0 9 * * *": lambda t: t.hour == 9 and t.minute == 0,
    "*/15 * * * *": lambda t: t.minute % 15 == 0,
    "30 2 * * 1": lambda t: t.weekday() == 0 and t.hour == 2 and t.minute == 30,
    "5 4 1 * *": lambda t: t.day == 1 and t.hour == 4 and t.minute == 5,
}


def reference_next_fire(expression: str, after: datetime) -> datetime:
    """The first whole minute strictly after ``after`` that the cron matches."""
    moment = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(60 * 24 * 40):
        if REFERENCE[expression](moment):
            return moment
        moment += timedelta(minutes=1)
    raise AssertionError(f"{expression} does not fire within 40 days")


# --- create ------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression", list(REFERENCE))
async def test_a_new_schedule_runs_next_at_the_crons_first_fire_after_the_database_clock(
        api, db_url, expression):
    agent = await create_agent(api, tools=TOOLS)
    before = await database_now(db_url)

    response = await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": expression})

    after = await database_now(db_url)
    assert response.status_code == 201, response.text
    next_run = parse_z(response.json()["next_run"])
    assert next_run in {reference_next_fire(expression, before),
                        reference_next_fire(expression, after)}
    assert next_run > before


async def test_a_new_schedule_has_the_documented_shape_and_defaults(api, db_url):
    agent = await create_agent(api, tools=TOOLS)

    response = await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": "0 9 * * *"})

    assert response.status_code == 201
    schedule = response.json()
    UUID(schedule["id"])
    assert schedule["agent_id"] == agent["id"]
    assert schedule["cron"] == "0 9 * * *"
    assert schedule["timeout_minutes"] == 5
    assert schedule["overlap"] == "skip"
    assert schedule["status"] == "active"
    assert schedule["input"] == {}
    assert schedule["display"] is None
    assert schedule["last_run"] is None
    assert RFC3339_Z.match(schedule["created_at"])
    assert (await api.get(f"/v1/schedules/{schedule['id']}")).json() == schedule
    stored = await fetch(db_url, "SELECT cron, next_run FROM schedules WHERE id = %s",
                         (schedule["id"],))
    assert stored == [("0 9 * * *", parse_z(schedule["next_run"]))]


async def test_display_input_overlap_and_timeout_are_stored_as_given(api):
    agent = await create_agent(api, tools=TOOLS)
    display = {"frequency": "weekly", "time_of_day": "08:30", "days_of_week": ["mon", "fri"]}
    run_input = {"script": [{"text": "Done."}], "nested": {"list": [1, 2.5, None, True]}}

    schedule = await create_schedule(api, agent["id"], "30 8 * * 1,5", display=display,
                                     input=run_input, overlap="allow", timeout_minutes=15)

    assert (schedule["display"], schedule["input"], schedule["overlap"],
            schedule["timeout_minutes"]) == (display, run_input, "allow", 15)


async def test_a_second_schedule_with_the_same_agent_and_cron_is_a_409_naming_the_first(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    first = await create_schedule(api, agent["id"], "0 9 * * *")
    before = await fingerprint(db_url)

    response = await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": "0 9 * * *",
                                                     "input": {"other": True}})

    body = assert_error(response, 409)
    assert body["existing_id"] == first["id"]
    assert first["id"] in body["message"]
    assert await fingerprint(db_url) == before


async def test_the_same_cron_on_another_agent_is_its_own_schedule(api):
    first = await create_schedule(api, (await create_agent(api, "one", tools=TOOLS))["id"],
                                  "0 9 * * *")

    second = await create_schedule(api, (await create_agent(api, "two", tools=TOOLS))["id"],
                                   "0 9 * * *")

    assert second["id"] != first["id"]


async def test_a_schedule_for_an_unknown_agent_is_a_404_and_nothing_is_stored(api, db_url):
    before = await fingerprint(db_url)

    body = assert_error(await api.post("/v1/schedules", json={
        "agent_id": MISSING, "cron": "0 9 * * *"}), 404, "not_found")

    assert MISSING in body["message"]
    assert await fingerprint(db_url) == before


# --- read, list, delete ------------------------------------------------------------------------

async def test_schedules_list_in_pages_and_filter_by_agent(api):
    one, two = (await create_agent(api, "one", tools=TOOLS),
                await create_agent(api, "two", tools=TOOLS))
    ids_one = {(await create_schedule(api, one["id"], cron))["id"]
               for cron in ("0 1 * * *", "0 2 * * *", "0 3 * * *")}
    id_two = (await create_schedule(api, two["id"], "0 4 * * *"))["id"]

    seen, cursor = [], None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/v1/schedules", params=params)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert sorted(seen) == sorted(ids_one | {id_two})
    filtered = (await api.get("/v1/schedules", params={"agent_id": one["id"]})).json()
    assert {item["id"] for item in filtered["items"]} == ids_one
    assert filtered["next_cursor"] is None


async def test_delete_is_204_then_the_schedule_is_gone_and_its_agent_stays(api):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"])

    response = await api.delete(f"/v1/schedules/{schedule['id']}")

    assert response.status_code == 204
    assert_error(await api.get(f"/v1/schedules/{schedule['id']}"), 404, "not_found")
    assert_error(await api.delete(f"/v1/schedules/{schedule['id']}"), 404, "not_found")
    assert (await api.get(f"/v1/agents/{agent['id']}")).status_code == 200


# --- pause, resume, patch ----------------------------------------------------------------------

async def test_pausing_keeps_next_run_and_resuming_moves_it_to_the_next_fire_after_now(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"], "*/15 * * * *")

    paused = await api.patch(f"/v1/schedules/{schedule['id']}", json={"status": "paused"})

    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "paused"
    assert paused.json()["next_run"] == schedule["next_run"]

    # While paused, time passes: the stored next_run is now long in the past.
    await fetch(db_url, "UPDATE schedules SET next_run = '2020-01-06T09:00:00Z' WHERE id = %s"
                        " RETURNING id", (schedule["id"],))
    before = await database_now(db_url)

    resumed = await api.patch(f"/v1/schedules/{schedule['id']}", json={"status": "active"})

    after = await database_now(db_url)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "active"
    next_run = parse_z(resumed.json()["next_run"])
    assert next_run > before
    assert next_run in {reference_next_fire("*/15 * * * *", before),
                        reference_next_fire("*/15 * * * *", after)}
    assert (await api.get(f"/v1/schedules/{schedule['id']}")).json() == resumed.json()


async def test_patch_changes_only_the_fields_it_names(api):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"], input={"a": 1}, timeout_minutes=7)

    response = await api.patch(f"/v1/schedules/{schedule['id']}", json={"input": {"b": 2}})

    assert response.status_code == 200, response.text
    patched = response.json()
    assert patched["input"] == {"b": 2}
    for unchanged in ("cron", "timeout_minutes", "overlap", "status", "next_run", "agent_id"):
        assert patched[unchanged] == schedule[unchanged], unchanged


@pytest.mark.parametrize("patch", [{"cron": "0 10 * * *"}, {"cron": "0 9 * * *"},
                                   {"status": "paused", "cron": "0 10 * * *"}])
async def test_patching_the_cron_is_a_422_cron_immutable_and_changes_nothing(api, db_url, patch):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"], "0 9 * * *")
    before = await fingerprint(db_url)

    body = assert_error(await api.patch(f"/v1/schedules/{schedule['id']}", json=patch), 422,
                        "cron_immutable")

    assert body["field"] == "cron"
    assert await fingerprint(db_url) == before


async def test_patching_an_unknown_schedule_is_a_404(api, db_url):
    before = await fingerprint(db_url)

    assert_error(await api.patch(f"/v1/schedules/{MISSING}", json={"status": "paused"}), 404,
                 "not_found")

    assert await fingerprint(db_url) == before


# --- run now and history -----------------------------------------------------------------------

async def test_run_now_queues_a_manual_schedule_run_and_leaves_the_schedule_untouched(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    run_input = {"script": [{"text": "Done."}], "who": "ops"}
    schedule = await create_schedule(api, agent["id"], "0 9 * * *", input=run_input,
                                     timeout_minutes=9)
    stored_before = await fetch(db_url, "SELECT s::text FROM schedules s WHERE id = %s",
                                (schedule["id"],))

    response = await api.post(f"/v1/schedules/{schedule['id']}/run-now")

    assert response.status_code == 202, response.text
    run = response.json()
    UUID(run["id"])
    assert (run["trigger_type"], run["trigger_source"], run["status"]) == (
        "schedule", "manual", "queued")
    assert (run["agent_id"], run["schedule_id"]) == (agent["id"], schedule["id"])
    # The schedule is untouched: same next_run, no last_run, same row byte for byte.
    after = (await api.get(f"/v1/schedules/{schedule['id']}")).json()
    assert after == schedule
    assert after["last_run"] is None
    assert await fetch(db_url, "SELECT s::text FROM schedules s WHERE id = %s",
                       (schedule["id"],)) == stored_before
    # Same queue path as a cron fire: a task named by the execution id.
    assert await fetch(db_url, "SELECT name, kind, execution_id::text FROM queue_tasks") == [
        (run["id"], "run", run["id"])]
    # The schedule's input and timeout are handed to the execution.
    assert await fetch(db_url, "SELECT input, timeout_minutes, trigger_type, trigger_source"
                               " FROM executions WHERE id = %s", (run["id"],)) == [
        (run_input, 9, "schedule", "manual")]
    assert (await api.get(f"/v1/runs/{run['id']}")).json()["input"] == run_input


async def test_the_schedule_history_shows_a_run_now(api):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"])
    assert (await api.get(f"/v1/schedules/{schedule['id']}/history")).json() == {
        "items": [], "next_cursor": None}
    run = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()

    history = (await api.get(f"/v1/schedules/{schedule['id']}/history")).json()

    assert len(history["items"]) == 1
    entry = history["items"][0]
    assert (entry["kind"], entry["reason"], entry["execution_id"], entry["status"]) == (
        "execution", "manual", run["id"], "queued")
    assert entry["scheduled_for"] == run["scheduled_for"]


async def test_run_now_and_history_of_an_unknown_schedule_are_404_and_store_nothing(api, db_url):
    before = await fingerprint(db_url)

    assert_error(await api.post(f"/v1/schedules/{MISSING}/run-now"), 404, "not_found")
    assert_error(await api.get(f"/v1/schedules/{MISSING}/history"), 404, "not_found")

    assert await fingerprint(db_url) == before


async def test_run_now_of_a_paused_schedule_still_leaves_it_paused(api):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"])
    paused = (await api.patch(f"/v1/schedules/{schedule['id']}", json={"status": "paused"})).json()

    assert (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).status_code == 202

    assert (await api.get(f"/v1/schedules/{schedule['id']}")).json() == paused
