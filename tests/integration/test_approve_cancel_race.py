"""Approve racing cancel while a worker is running (issue 28, S7 item 9): a cancel committed
before the resumed run's approved call starts means the call never runs, and a cancel that
arrives while it runs waits for it (worker/cancel_fence.py). Real connections: the in-process
API and worker share a pool of the test's database; the fence has a connection of its own."""

from __future__ import annotations

import asyncio

from tickwork.sql import failpoints
from tickwork.sql.db import connect
from tests.integration.test_honest_runs import paused_run
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, scalar, until

SEND = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                    "arguments": {"recipient": "ops", "text": "report"}}]},
                   {"text": "Sent."}]}
RACES = 20


def sent(db_url: str, run_id: str) -> int:
    return scalar(db_url, "SELECT count(*) FROM demo_outbox WHERE execution_id = %s", (run_id,))


def ended(run_id: str) -> tuple[str, tuple]:
    return ("SELECT status IN ('completed', 'cancelled', 'failed') AND breadcrumb IS NULL"
            " FROM executions WHERE id = %s", (run_id,))


async def test_a_cancel_that_lands_after_the_resume_was_taken_stops_the_approved_send(
        api, pool, db_url):
    """The one in eight: the approval queued the resume, a worker took the run back to running,
    and then the cancel committed. The approved send must not run."""
    run_id = await paused_run(api, pool, db_url)
    [approval] = (await api.get("/v1/approvals")).json()["items"]
    failpoints.arm("resume.before_approved_call", "block:resumed")
    try:
        async with running_worker(pool, db_url):
            assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
            await failpoints.wait_reached("resumed")  # the run is running again, send not made
            cancel = await api.post(f"/v1/runs/{run_id}/cancel")
            assert cancel.status_code == 202 and cancel.json()["status"] == "running"
            failpoints.release("resumed")
            await until(db_url, *ended(run_id))
    finally:
        failpoints.disarm_all()
    assert sent(db_url, run_id) == 0
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("cancelled", "cancelled")
    types = [e["type"] for e in await events(api, run_id)]
    assert "tool_start" not in types and types.count("run_complete") == 1


async def test_approve_and_cancel_racing_with_a_worker_running_never_send_after_the_cancel(
        api, pool, db_url):
    """Twenty waiting runs, each approved and cancelled on two connections while a worker
    takes resumes: half at the same moment, half with the cancel sent the moment the run is
    seen taken back (between the resume's claim and its send, where the race was lost). A send
    is either made before the cancel was answered or not at all, never after; each run sends at
    most once and ends as its answers say."""
    agent = (await api.post("/v1/agents", json={"name": "racer",
                                                "tools": ["demo.send_message"]})).json()
    run_ids = [(await api.post(f"/v1/agents/{agent['id']}/runs",
                               json={"input": SEND})).json()["id"] for _ in range(RACES)]
    async with running_worker(pool, db_url):
        await until(db_url, f"SELECT count(*) = {RACES} FROM approvals WHERE status = 'pending'")
    approvals = {a["execution_id"]: a["id"] for a in
                 (await api.get("/v1/approvals", params={"limit": 50})).json()["items"]}

    async def cancel(run_id: str, when_taken_back: bool):
        if when_taken_back:
            await taken_back(db_url, run_id)
        answer = await api.post(f"/v1/runs/{run_id}/cancel")
        return answer, sent(db_url, run_id)  # counted once the cancel has committed

    outcomes = {}
    # The moment between a resume's claim and its call is made a little longer (in-process it
    # is a few statements), so that the cancels sent then land inside it.
    failpoints.arm("resume.before_approved_call", "sleep:50")
    try:
        async with running_worker(pool, db_url):
            for n, run_id in enumerate(run_ids):
                decided, (cancelled, sent_when_cancelled) = await asyncio.gather(
                    api.post(f"/v1/approvals/{approvals[run_id]}/approve"),
                    cancel(run_id, n % 2))
                outcomes[run_id] = (decided.status_code, cancelled.status_code,
                                    sent_when_cancelled)
            await until(db_url, "SELECT count(*) = 0 FROM queue_tasks")
            for run_id in run_ids:
                await until(db_url, *ended(run_id))
    finally:
        failpoints.disarm_all()
    for run_id, (decided, cancelled, sent_when_cancelled) in outcomes.items():
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        sends = sent(db_url, run_id)
        if cancelled == 202:  # the cancel took: nothing is sent after it was answered
            assert sends == sent_when_cancelled <= 1, (run_id, outcomes[run_id], sends)
            # A run asked to stop while running ends at its next turn boundary; one whose last
            # turn was already under way (its send made before the cancel) may complete.
            assert (run["status"], run["outcome"]) == ("cancelled", "cancelled") or (
                run["status"] == "completed" and sends == 1), (run_id, outcomes[run_id], run)
        else:  # the run had already finished: approved, sent once, completed
            assert (decided, cancelled, sends) == (200, 409, 1), (run_id, outcomes[run_id])
            assert run["status"] == "completed"
        if decided == 409:  # the cancel came first: the approval was never granted
            assert sends == 0
        assert [e["type"] for e in await events(api, run_id)].count("run_complete") == 1
    # Every race was one of the three: sent before the cancel, never sent, or finished first.
    assert len(outcomes) == RACES


async def taken_back(db_url: str, run_id: str) -> None:
    """Return as soon as the run is no longer waiting (a worker took its resume, or it ended),
    asking back to back on a connection of its own: no notification marks that moment."""
    conn = await connect(db_url, application_name="tickwork-test-watch")
    try:
        for _ in range(100_000):  # bounded: a resume is taken within a few thousand asks
            row = await (await conn.execute(
                "SELECT status = 'completed' AND breadcrumb = 'suspended' AS waiting"
                " FROM executions WHERE id = %s", (run_id,))).fetchone()
            if not row["waiting"]:
                return
        raise AssertionError(f"run {run_id} was never taken back")
    finally:
        await conn.close()
