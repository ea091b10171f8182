"""Run usage as stored and shown, and run control: paused and draft agents, cancelling a run
that waits for approval. Through the API against a real Postgres (and a real worker where a
run has to pause)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID, uuid4

import httpx
import psycopg
import pytest

from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.scheduler.tick import run_tick
from tickwork.sql.db import open_pool
from tickwork.sql.journal import JournalWriter, RunJournal
from tests.factories import create_agent, queue_run
from tests.integration.api_checks import assert_error, fingerprint
from tests.integration.test_honest_runs import paused_run
from tests.integration.test_roles import granted  # noqa: F401  (fixture)
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, scalar, until
from tickwork.worker.claim import claim_queued_runs, claim_resume

ZERO = {"input_tokens": 0, "output_tokens": 0, "model_calls": 0}
TOOLS = ["demo.get_record"]  # the tools of every agent made here


async def start_by_hand(api, pool, writer: JournalWriter | None = None) -> tuple[str, RunJournal]:
    """A run queued through the API and claimed as a worker claims it, with its journal: the
    test then plays the worker's part of finishing or suspending it."""
    agent = await create_agent(api, f"by-hand-{uuid4().hex[:8]}", tools=TOOLS)
    run_id = await queue_run(api, agent["id"])
    [run] = await claim_queued_runs(pool, limit=10, worker_id="test")
    assert str(run.id) == run_id
    return run_id, RunJournal(pool, run.id, run.run_token, next_seq=run.next_seq, writer=writer)


def terminal(journal: RunJournal, usage: dict) -> None:
    journal.emit("run_complete", {"status": "completed", "outcome": "done", "usage": usage},
                 parent=1)


async def run_json(api, run_id: str) -> dict:
    response = await api.get(f"/v1/runs/{run_id}")
    assert response.status_code == 200, response.text
    return response.json()


# --- usage -------------------------------------------------------------------------------

async def test_every_run_shape_carries_usage_starting_at_zero(api):
    agent_id = (await create_agent(api, "controlled", tools=TOOLS))["id"]
    queued = (await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}})).json()
    assert queued["usage"] == ZERO
    assert (await run_json(api, queued["id"]))["usage"] == ZERO
    [listed] = (await api.get("/v1/runs")).json()["items"]
    assert listed["usage"] == ZERO
    assert all(type(v) is int for v in listed["usage"].values())


async def test_a_run_finished_through_the_process_journal_writer_stores_its_usage(api, pool):
    writer = JournalWriter(pool)
    run_id, journal = await start_by_hand(api, pool, writer)
    usage = {"input_tokens": 1200, "output_tokens": 345, "model_calls": 3}
    terminal(journal, usage)
    try:
        await journal.finish(status="completed", outcome="done", usage=usage)
    finally:
        await writer.close()
    run = await run_json(api, run_id)
    assert (run["status"], run["outcome"], run["usage"]) == ("completed", "done", usage)
    [listed] = (await api.get("/v1/runs")).json()["items"]
    assert listed["usage"] == usage


async def test_a_run_finished_alone_stores_its_usage_and_no_usage_leaves_it(api, pool):
    run_id, journal = await start_by_hand(api, pool)
    usage = {"input_tokens": 10, "output_tokens": 2, "model_calls": 1}
    terminal(journal, usage)
    await journal.finish(status="completed", outcome="done", usage=usage)
    assert (await run_json(api, run_id))["usage"] == usage

    other_id, other = await start_by_hand(api, pool)
    terminal(other, ZERO)
    await other.finish(status="failed", outcome="failed", reason="boom")  # usage not given
    assert (await run_json(api, other_id))["usage"] == ZERO


async def test_a_suspension_stores_usage_so_far_and_the_resumed_finish_the_whole_total(api, pool):
    run_id, journal = await start_by_hand(api, pool)
    so_far = {"input_tokens": 500, "output_tokens": 40, "model_calls": 1}
    approval_id = f"{run_id}:call-1"
    journal.emit("approval_required", {"approval_id": approval_id}, parent=1)
    await journal.suspend(state={"messages": []}, version=1, approval_id=approval_id,
                          tool_call_id="call-1", tool="demo.send_message",
                          arguments={"recipient": "ops", "text": "hi"}, usage=so_far)
    run = await run_json(api, run_id)
    assert (run["status"], run["breadcrumb"], run["usage"]) == ("waiting", "suspended", so_far)

    assert (await api.post(f"/v1/approvals/{approval_id}/approve")).status_code == 200
    claim = await claim_resume(pool, execution_id=UUID(run_id), task_name=approval_id,
                               worker_id="test")
    assert claim is not None and claim.resume.status == "approved"
    resumed = RunJournal(pool, UUID(run_id), claim.run_token, next_seq=claim.next_seq)
    total = {"input_tokens": 1100, "output_tokens": 90, "model_calls": 2}
    terminal(resumed, total)
    await resumed.finish(status="completed", outcome="done", usage=total)
    run = await run_json(api, run_id)
    assert (run["status"], run["outcome"], run["usage"]) == ("completed", "done", total)


# --- paused and draft agents ---------------------------------------------------------------

async def test_a_paused_agent_refuses_an_api_run_and_queues_nothing(api, db_url):
    agent_id = (await create_agent(api, "controlled", tools=TOOLS, status="paused"))["id"]
    before = await fingerprint(db_url)
    for headers in ({}, {"Idempotency-Key": "first-try"}):
        body = assert_error(await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}},
                                           headers=headers), 409, "agent_paused")
        assert "paused" in body["message"] and agent_id in body["message"]
    assert await fingerprint(db_url) == before
    assert scalar(db_url, "SELECT count(*) FROM executions") == 0
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0


async def test_run_now_of_a_paused_agents_schedule_is_refused_and_queues_nothing(api, db_url):
    agent_id = (await create_agent(api, "controlled", tools=TOOLS))["id"]
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent_id,
                                                      "cron": "0 9 * * *"})).json()
    agent = (await api.get(f"/v1/agents/{agent_id}")).json()
    paused = await api.put(f"/v1/agents/{agent_id}", json={
        "name": agent["name"], "tools": agent["tools"], "status": "paused"})
    assert paused.status_code == 200, paused.text
    body = assert_error(await api.post(f"/v1/schedules/{schedule['id']}/run-now"), 409,
                        "agent_paused")
    assert "paused" in body["message"]
    assert scalar(db_url, "SELECT count(*) FROM executions") == 0
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0

    resumed = await api.put(f"/v1/agents/{agent_id}", json={
        "name": agent["name"], "tools": agent["tools"], "status": "active"})
    assert resumed.status_code == 200
    assert (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).status_code == 202
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 1


async def test_a_replayed_request_still_returns_its_run_after_the_agent_is_paused(api, db_url):
    agent_id = (await create_agent(api, "controlled", tools=TOOLS))["id"]
    key = {"Idempotency-Key": "nightly-1"}
    first = await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}}, headers=key)
    assert first.status_code == 202
    await api.put(f"/v1/agents/{agent_id}", json={"name": "controlled",
                                                  "tools": ["demo.get_record"], "status": "paused"})
    again = await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}}, headers=key)
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert_error(await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}},
                                headers={"Idempotency-Key": "nightly-2"}), 409, "agent_paused")
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1


async def test_a_draft_agent_runs_by_hand_but_never_from_its_schedule(api, pool, settings, db_url):
    agent_id = (await create_agent(api, "controlled", tools=TOOLS, status="draft"))["id"]
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent_id,
                                                      "cron": "*/5 * * * *"})).json()
    by_api = await api.post(f"/v1/agents/{agent_id}/runs", json={"input": {}})
    by_run_now = await api.post(f"/v1/schedules/{schedule['id']}/run-now")
    assert (by_api.status_code, by_run_now.status_code) == (202, 202)
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 2

    next_run = scalar(db_url, "SELECT next_run FROM schedules WHERE id = %s", (schedule["id"],))
    outcome = await run_tick(pool, settings, now=next_run + timedelta(seconds=1))
    assert outcome.ok and outcome.dispatch.claimed == 1 and outcome.dispatch.created == 0
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE trigger_source = 'cron'") == 0
    history = (await api.get(f"/v1/schedules/{schedule['id']}/history")).json()["items"]
    skipped = [h for h in history if h["kind"] != "execution"]
    assert [(h["scheduled_for"], h["reason"]) for h in skipped] == [
        (next_run.isoformat().replace("+00:00", "Z"), "agent_inactive")]


# --- cancelling a run that waits for approval ------------------------------------------------

async def test_cancel_ends_a_run_waiting_for_approval_and_cancels_its_approvals(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    [approval] = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
    before = await events(api, run_id)

    response = await api.post(f"/v1/runs/{run_id}/cancel")
    assert response.status_code == 202, response.text
    run = await run_json(api, run_id)
    assert (run["status"], run["outcome"], run["breadcrumb"]) == ("cancelled", "cancelled", None)
    assert run["finished_at"] and "approval" in run["reason"]

    after = await events(api, run_id)
    assert after[: len(before)] == before
    [end] = after[len(before):]
    assert (end["type"], end["seq"], end["parent_seq"]) == ("run_complete", before[-1]["seq"] + 1, 1)
    assert (end["payload"]["status"], end["payload"]["outcome"]) == ("cancelled", "cancelled")

    cancelled = (await api.get("/v1/approvals", params={"status": "cancelled"})).json()["items"]
    assert [a["id"] for a in cancelled] == [approval["id"]]
    assert (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"] == []
    for verb in ("approve", "reject"):
        body = assert_error(await api.post(f"/v1/approvals/{approval['id']}/{verb}"), 409,
                            "run_cancelled")
        assert "cancelled" in body["message"] and run_id in body["message"]
    assert scalar(db_url, "SELECT status FROM approvals WHERE id = %s", (approval["id"],)) == "cancelled"
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
    # The saved state held the waiting call's real arguments; the call will never run.
    assert scalar(db_url, "SELECT count(*) FROM run_states WHERE execution_id = %s", (run_id,)) == 0
    assert_error(await api.post(f"/v1/runs/{run_id}/cancel"), 409)


async def test_the_api_role_can_cancel_a_run_waiting_for_approval(api, pool, granted, settings,
                                                                  tokens, db_url):
    run_id, journal = await start_by_hand(api, pool)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{run_id}:c1",
                          tool_call_id="c1", tool="demo.send_message", arguments={"text": "x"})
    api_pool = await open_pool(granted["tickwork_api"], application_name="tickwork-api")
    app = create_app(settings, pool=api_pool)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://api.test",
                                     headers={"Authorization": f"Bearer {tokens['acme']}"}) as client:
            response = await client.post(f"/v1/runs/{run_id}/cancel")
            assert response.status_code == 202, response.text
            assert response.json()["status"] == "cancelled"
    finally:
        await stop_hub(app)
        await api_pool.close()
    assert scalar(db_url, "SELECT status FROM approvals") == "cancelled"
    assert scalar(db_url, "SELECT count(*) FROM run_states") == 0
    with psycopg.connect(granted["tickwork_api"], autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # it may delete, never read
            conn.execute("SELECT state FROM run_states")


async def test_cancel_after_an_approval_drops_the_queued_resume_and_nothing_is_sent(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    [approval] = (await api.get("/v1/approvals")).json()["items"]
    assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE kind = 'resume'") == 1

    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
    assert scalar(db_url, "SELECT status FROM approvals") == "approved"  # decided before
    # A resume delivered anyway (it was leased before the cancel) finds nothing to resume.
    assert await claim_resume(pool, execution_id=UUID(run_id), task_name=approval["id"],
                              worker_id="test") is None
    async with running_worker(pool, db_url):
        pass
    run = await run_json(api, run_id)
    assert (run["status"], run["outcome"]) == ("cancelled", "cancelled")
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0
    assert [e["type"] for e in await events(api, run_id)].count("run_complete") == 1


async def test_approve_and_cancel_racing_on_waiting_runs_never_send_and_agree(api, pool, db_url):
    """Ten waiting runs, each approved and cancelled at the same moment on two connections:
    every run ends cancelled with one terminal event, nothing is sent, and each approval is
    what its decision's answer said (approved with a 200, or cancelled with a 409)."""
    agent = (await api.post("/v1/agents", json={"name": "racer",
                                                "tools": ["demo.send_message"]})).json()
    send = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                        "arguments": {"recipient": "ops", "text": "x"}}]},
                       {"text": "Sent."}]}
    run_ids = [(await api.post(f"/v1/agents/{agent['id']}/runs",
                               json={"input": send})).json()["id"] for _ in range(10)]
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT count(*) = 10 FROM approvals WHERE status = 'pending'")
    approvals = {a["execution_id"]: a["id"] for a in
                 (await api.get("/v1/approvals", params={"limit": 50})).json()["items"]}

    async def race(run_id):
        return await asyncio.gather(api.post(f"/v1/approvals/{approvals[run_id]}/approve"),
                                    api.post(f"/v1/runs/{run_id}/cancel"))

    answers = dict(zip(run_ids, await asyncio.gather(*[race(r) for r in run_ids])))
    async with running_worker(pool, db_url):  # any resume that slipped through is delivered
        await until(db_url, "SELECT count(*) = 0 FROM queue_tasks")
    for run_id, (decided, cancelled) in answers.items():
        assert cancelled.status_code == 202, cancelled.text
        run = await run_json(api, run_id)
        assert (run["status"], run["outcome"]) == ("cancelled", "cancelled")
        status = scalar(db_url, "SELECT status FROM approvals WHERE id = %s", (approvals[run_id],))
        assert (decided.status_code, status) in ((200, "approved"), (409, "cancelled")), decided.text
        assert [e["type"] for e in await events(api, run_id)].count("run_complete") == 1
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0
