"""Deploys lose nothing (DESIGN "Deploys lose nothing"): a run still going when a worker's
grace period ends is released — journaled, then retried at once as a new attempt any worker
can take — and never cancelled; a run resumed after an approval goes back to its pause with
the decision kept. These run the worker in this process; R10 with real processes and SIGTERM
is in test_worker_processes.py.
"""

from __future__ import annotations

import asyncio

from tests.factories import queue_run
from tests.integration.test_roles import granted  # noqa: F401 (a fixture)
from tests.integration.test_visible_events import Gate, gated_worker, has_event
from tests.integration.test_worker_runs import events
from tests.integration.workers import scalar, until

CANARY = "sk-live-" + "Q" * 40
SEND = {"name": "demo.send_message", "arguments": {"recipient": "ops",
                                                   "text": f"report; key {CANARY}"}}


def opened() -> Gate:
    gate = Gate()
    gate.opened.set()
    return gate


def row(db_url: str, run_id, columns: str) -> tuple:
    import psycopg

    with psycopg.connect(db_url) as conn:
        return conn.execute(f"SELECT {columns} FROM executions WHERE id = %s", (run_id,)).fetchone()


async def agent(api, tools: list[str], auto_approve: list[str] = ()) -> str:
    response = await api.post("/v1/agents", json={"name": "deploy", "tools": tools,
                                                  "auto_approve": list(auto_approve)})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def test_a_run_still_going_after_the_grace_period_is_released_and_retried_at_once(
        api, pool, db_url):
    run_id = await queue_run(api, await agent(api, ["demo.get_record"]),
                             {"script": [{"sleep": 30}, {"text": "Finished."}]})
    async with gated_worker(pool, db_url, model=Gate(), shutdown_grace_seconds=0):
        await until(db_url, *has_event(run_id, "step_start"), timeout=30)
    # The worker has stopped: the run was released, not cancelled, and its retry is queued now.
    status, outcome, breadcrumb, reason, deadline = row(
        db_url, run_id, "status, outcome, breadcrumb, reason, deadline")
    retry_id, attempt, max_attempts, retry_status, created = row(
        db_url, scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s", (run_id,)),
        "id, attempt, max_attempts, status, created_at")
    assert (status, outcome, breadcrumb) == ("failed", "failed", "released")
    assert reason == ("released: the worker shut down before the run finished; "
                      f"retried as {retry_id}")
    assert (attempt, max_attempts, retry_status) == (2, 4, "queued")  # budget not used up
    assert created < deadline  # queued at once, not rescued by the sweep after the deadline
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE execution_id = %s",
                  (retry_id,)) == 1
    journal = await events(api, run_id)
    assert [e["type"] for e in journal] == ["run_start", "step_start", "run_complete"]
    assert journal[-1]["payload"] == {"status": "failed", "outcome": "failed", "by": "worker",
                                      "released": True, "reason": reason,
                                      "retry_id": str(retry_id)}
    async with gated_worker(pool, db_url, model=opened()):  # any worker takes the retry
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (retry_id,), timeout=30)
    assert row(db_url, retry_id, "outcome")[0] == "done"
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'cancelled'") == 0
    assert scalar(db_url, "SELECT count(*) FROM executions") == 2


async def test_a_released_resumed_run_keeps_its_decision_and_never_sends_twice(api, pool, db_url):
    run_id = await queue_run(api, await agent(api, ["demo.send_message"]), {
        "script": [{"tool_calls": [SEND]}, {"sleep": 30}, {"text": "Sent."}]})
    async with gated_worker(pool, db_url, model=opened()):
        await until(db_url, "SELECT count(*) = 1 FROM approvals WHERE status = 'pending'",
                    timeout=30)
    approval_id = (await api.get("/v1/approvals")).json()["items"][0]["id"]
    assert (await api.post(f"/v1/approvals/{approval_id}/approve")).status_code == 200
    model = Gate()
    async with gated_worker(pool, db_url, model=model, shutdown_grace_seconds=0):
        await asyncio.wait_for(model.entered.wait(), 30)  # the send ran; the model is thinking
        assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    # Released back to its pause: same execution, decision kept, its resume queued again.
    assert row(db_url, run_id, "status, breadcrumb") == ("completed", "suspended")
    assert scalar(db_url, "SELECT status FROM approvals WHERE id = %s", (approval_id,)) == "approved"
    assert scalar(db_url, "SELECT kind FROM queue_tasks WHERE name = %s", (approval_id,)) == "resume"
    journal = await events(api, run_id)
    assert journal[-1]["type"] == "gate_decision"
    assert journal[-1]["payload"]["verdict"] == "released"
    assert journal[-1]["payload"]["units_left"] == 20  # as the run will have them again
    assert "run_complete" not in [e["type"] for e in journal]
    # The call has run: its real arguments are not put back at rest with the state.
    saved = scalar(db_url, "SELECT state::text FROM run_states WHERE execution_id = %s", (run_id,))
    assert "demo.send_message" in saved and CANARY not in saved
    async with gated_worker(pool, db_url, model=opened()):
        await until(db_url, *has_event(run_id, "run_complete"), timeout=30)
    assert row(db_url, run_id, "status, outcome") == ("completed", "done")
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1  # the approved call ran once
    assert CANARY in scalar(db_url, "SELECT text FROM demo_outbox")  # with its real arguments
    journal = await events(api, run_id)
    completes = [e["payload"] for e in journal if e["type"] == "tool_complete"]
    assert [c["replayed"] for c in completes] == [False, True]
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert [e["type"] for e in journal].count("run_complete") == 1
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1


async def test_the_worker_role_may_release_a_run_and_queue_its_retry(api, granted, db_url):
    """Deployed with least-privilege roles (sql/grants.sql), the release still lands."""
    from tickwork.sql.db import open_pool

    run_id = await queue_run(api, await agent(api, ["demo.get_record"]),
                             {"script": [{"sleep": 30}, {"text": "Finished."}]})
    worker_pool = await open_pool(granted["tickwork_worker"], application_name="tickwork-worker")
    try:
        async with gated_worker(worker_pool, db_url, model=Gate(), shutdown_grace_seconds=0):
            await until(db_url, *has_event(run_id, "step_start"), timeout=30)
    finally:
        await worker_pool.close()
    assert row(db_url, run_id, "status, breadcrumb") == ("failed", "released")
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks q JOIN executions e"
                          " ON e.id = q.execution_id WHERE e.retry_of = %s", (run_id,)) == 1
