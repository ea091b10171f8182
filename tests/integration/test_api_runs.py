"""Runs: an agent run through the API, the run list and its filters, one run's contract shape,
and Idempotency-Key on both POSTs that start runs (agent runs and run-now)."""

from __future__ import annotations

import asyncio
import re
from uuid import UUID

import pytest

from tests.factories import create_agent, create_schedule
from tests.integration.api_checks import fingerprint, fetch, assert_error, check_every_response


RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
MISSING = "0190a000-0000-7000-8000-000000000000"
TOOLS = ["demo.get_record"]  # the tools of every agent made here
RUN_CONTRACT_FIELDS = {"id", "agent_id", "schedule_id", "trigger_type", "trigger_source", "status",
                       "outcome", "breadcrumb", "attempt", "retry_of", "scheduled_for",
                       "created_at", "started_at", "finished_at"}


@pytest.fixture(autouse=True)
def every_response_is_well_formed(api):
    check_every_response(api)


async def start_run(api, agent_id: str, **body) -> dict:
    response = await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}, **body})
    assert response.status_code == 202, response.text
    return response.json()


def ids(page: dict) -> set[str]:
    return {item["id"] for item in page["items"]}


# --- starting a run ----------------------------------------------------------------------------

async def test_running_an_agent_queues_an_api_run_and_its_queue_task(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    run_input = {"script": [{"text": "Done."}], "judge": ["done"]}

    response = await api.post(f"/v1/agents/{agent['id']}/runs",
                              json={"input": run_input, "timeout_minutes": 3})

    assert response.status_code == 202, response.text
    run = response.json()
    UUID(run["id"])
    assert (run["trigger_type"], run["trigger_source"], run["status"]) == ("run", "api", "queued")
    assert (run["agent_id"], run["schedule_id"], run["attempt"], run["retry_of"]) == (
        agent["id"], None, 1, None)
    assert await fetch(db_url, "SELECT input, timeout_minutes FROM executions WHERE id = %s",
                       (run["id"],)) == [(run_input, 3)]
    assert await fetch(db_url, "SELECT name, kind, execution_id::text FROM queue_tasks") == [
        (run["id"], "run", run["id"])]


async def test_a_run_without_a_body_gets_empty_input_and_the_default_timeout(api, db_url):
    agent = await create_agent(api, tools=TOOLS)

    response = await api.post(f"/v1/agents/{agent['id']}/runs")

    assert response.status_code == 202, response.text
    assert await fetch(db_url, "SELECT input, timeout_minutes FROM executions") == [({}, 5)]


async def test_running_an_unknown_agent_is_a_404_and_queues_nothing(api, db_url):
    before = await fingerprint(db_url)

    body = assert_error(await api.post(f"/v1/agents/{MISSING}/runs", json={"input": {}}), 404,
                        "not_found")

    assert MISSING in body["message"]
    assert await fingerprint(db_url) == before


# --- reading runs ------------------------------------------------------------------------------

async def test_a_run_has_every_contract_field_with_its_value(api):
    agent = await create_agent(api, tools=TOOLS)
    started = await start_run(api, agent["id"])

    response = await api.get(f"/v1/runs/{started['id']}")

    assert response.status_code == 200
    run = response.json()
    assert RUN_CONTRACT_FIELDS <= set(run)
    assert run["id"] == started["id"]
    assert run["agent_id"] == agent["id"]
    assert run["schedule_id"] is None
    assert (run["trigger_type"], run["trigger_source"], run["status"]) == ("run", "api", "queued")
    assert (run["outcome"], run["breadcrumb"], run["retry_of"]) == (None, None, None)
    assert run["attempt"] == 1
    assert RFC3339_Z.match(run["scheduled_for"]) and RFC3339_Z.match(run["created_at"])
    assert (run["started_at"], run["finished_at"]) == (None, None)
    assert run == started


async def test_an_unknown_run_is_a_404_naming_the_id(api):
    body = assert_error(await api.get(f"/v1/runs/{MISSING}"), 404, "not_found")

    assert MISSING in body["message"]


async def test_the_run_list_filters_by_agent_schedule_and_status(api, db_url):
    alpha, beta = (await create_agent(api, "alpha", tools=TOOLS),
                   await create_agent(api, "beta", tools=TOOLS))
    schedule = await create_schedule(api, alpha["id"])
    alpha_runs = {(await start_run(api, alpha["id"]))["id"] for _ in range(2)}
    manual = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()["id"]
    beta_run = (await start_run(api, beta["id"]))["id"]
    await fetch(db_url, "UPDATE executions SET status = 'completed', outcome = 'done',"
                        " started_at = now(), finished_at = now() WHERE id = %s RETURNING id",
                (beta_run,))

    async def listed(**params) -> set[str]:
        response = await api.get("/v1/runs", params=params)
        assert response.status_code == 200, response.text
        assert response.json()["next_cursor"] is None
        return ids(response.json())

    assert await listed() == alpha_runs | {manual, beta_run}
    assert await listed(agent_id=alpha["id"]) == alpha_runs | {manual}
    assert await listed(agent_id=beta["id"]) == {beta_run}
    assert await listed(schedule_id=schedule["id"]) == {manual}
    assert await listed(status="queued") == alpha_runs | {manual}
    assert await listed(status="completed") == {beta_run}
    assert await listed(status="failed") == set()
    assert await listed(agent_id=alpha["id"], status="completed") == set()
    assert await listed(agent_id=MISSING) == set()
    assert_error(await api.get("/v1/runs", params={"status": "succeeded"}), 422)
    assert_error(await api.get("/v1/runs", params={"agent_id": "alpha"}), 422)


async def test_runs_list_in_pages_each_run_once(api):
    agent = await create_agent(api, tools=TOOLS)
    started = {(await start_run(api, agent["id"]))["id"] for _ in range(5)}

    seen, cursor = [], None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/v1/runs", params=params)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert cursor is None
    assert len(seen) == 5 and set(seen) == started


# --- Idempotency-Key ---------------------------------------------------------------------------

async def test_ten_concurrent_agent_runs_with_one_key_make_exactly_one_execution(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    body = {"input": {"script": [{"text": "Done."}]}}

    responses = await asyncio.gather(*[
        api.post(f"/v1/agents/{agent['id']}/runs", json=body,
                 headers={"Idempotency-Key": "nightly-2026-11-30"}) for _ in range(10)])

    assert [r.status_code for r in responses] == [202] * 10, [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    run_id = responses[0].json()["id"]
    assert await fetch(db_url, "SELECT id::text, idempotency_key FROM executions") == [
        (run_id, "nightly-2026-11-30")]
    assert await fetch(db_url, "SELECT name FROM queue_tasks") == [(run_id,)]


async def test_a_retried_agent_run_with_the_same_key_returns_the_first_execution(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    headers = {"Idempotency-Key": "retry-me"}
    first = await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {"n": 1}},
                           headers=headers)
    before = await fingerprint(db_url)

    again = await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {"n": 1}},
                           headers=headers)

    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == first.json()["id"]
    assert await fingerprint(db_url) == before


@pytest.mark.parametrize("second_body", [
    {"input": {"n": 2}},
    {"input": {"n": 1}, "timeout_minutes": 7},
    {"input": {}},
])
async def test_the_same_key_with_a_different_body_is_a_422_and_stores_nothing(
        api, db_url, second_body):
    agent = await create_agent(api, tools=TOOLS)
    headers = {"Idempotency-Key": "k-1"}
    first = await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {"n": 1}},
                           headers=headers)
    assert first.status_code == 202
    before = await fingerprint(db_url)

    response = await api.post(f"/v1/agents/{agent['id']}/runs", json=second_body, headers=headers)

    assert_error(response, 422, "idempotency_key_reused")
    assert await fingerprint(db_url) == before


async def test_the_same_key_on_another_agent_is_a_422_and_stores_nothing(api, db_url):
    one, two = (await create_agent(api, "one", tools=TOOLS),
                await create_agent(api, "two", tools=TOOLS))
    headers = {"Idempotency-Key": "shared"}
    assert (await api.post(f"/v1/agents/{one['id']}/runs", json={"input": {}},
                           headers=headers)).status_code == 202
    before = await fingerprint(db_url)

    assert_error(await api.post(f"/v1/agents/{two['id']}/runs", json={"input": {}},
                                headers=headers), 422, "idempotency_key_reused")

    assert await fingerprint(db_url) == before


async def test_ten_concurrent_run_nows_with_one_key_make_exactly_one_execution(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    schedule = await create_schedule(api, agent["id"], input={"from": "schedule"})

    responses = await asyncio.gather(*[
        api.post(f"/v1/schedules/{schedule['id']}/run-now", headers={"Idempotency-Key": "button"})
        for _ in range(10)])

    assert [r.status_code for r in responses] == [202] * 10, [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    run_id = responses[0].json()["id"]
    assert await fetch(db_url, "SELECT id::text, trigger_source, input FROM executions") == [
        (run_id, "manual", {"from": "schedule"})]
    assert await fetch(db_url, "SELECT name FROM queue_tasks") == [(run_id,)]


async def test_a_run_now_key_reused_for_another_request_is_a_422_and_stores_nothing(api, db_url):
    agent = await create_agent(api, tools=TOOLS)
    first = await create_schedule(api, agent["id"], "0 9 * * *")
    second = await create_schedule(api, agent["id"], "0 10 * * *")
    headers = {"Idempotency-Key": "button"}
    assert (await api.post(f"/v1/schedules/{first['id']}/run-now",
                           headers=headers)).status_code == 202
    before = await fingerprint(db_url)

    assert_error(await api.post(f"/v1/schedules/{second['id']}/run-now", headers=headers), 422,
                 "idempotency_key_reused")
    assert_error(await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}},
                                headers=headers), 422, "idempotency_key_reused")

    assert await fingerprint(db_url) == before


async def test_runs_without_a_key_are_never_deduplicated(api, db_url):
    agent = await create_agent(api, tools=TOOLS)

    responses = await asyncio.gather(*[
        api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}}) for _ in range(3)])

    assert len({r.json()["id"] for r in responses}) == 3
    assert await fetch(db_url, "SELECT count(*) FROM queue_tasks") == [(3,)]


async def test_an_idempotency_key_is_scoped_to_its_tenant(api, db_url):
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    acme_agent = await create_agent(api, tools=TOOLS)
    globex_agent = (await api.post("/v1/agents", json={"name": "reporter"}, headers=globex)).json()
    acme_run = (await api.post(f"/v1/agents/{acme_agent['id']}/runs", json={"input": {}},
                               headers={"Idempotency-Key": "same"})).json()

    response = await api.post(f"/v1/agents/{globex_agent['id']}/runs", json={"input": {}},
                              headers={**globex, "Idempotency-Key": "same"})

    assert response.status_code == 202, response.text
    assert response.json()["id"] != acme_run["id"]
    assert response.json()["agent_id"] == globex_agent["id"]
    assert await fetch(db_url, "SELECT count(*) FROM executions WHERE idempotency_key = 'same'") \
        == [(2,)]


async def test_runs_can_be_listed_since_a_utc_time_and_a_zone_is_refused(api):
    agent = await create_agent(api, "since-agent", tools=TOOLS)
    run = (await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}})).json()
    listed = (await api.get("/v1/runs", params={"since": "2000-01-01T00:00:00Z"})).json()["items"]
    assert run["id"] in [r["id"] for r in listed]
    later = (await api.get("/v1/runs", params={"since": "2999-01-01T00:00:00Z"})).json()["items"]
    assert later == []
    refused = await api.get("/v1/runs", params={"since": "2026-01-01T00:00:00+02:00"})
    assert_error(refused, 422, "timezone_not_allowed")
