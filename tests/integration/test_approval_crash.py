"""A worker that dies while pausing a run for approval leaves no half-made pause behind."""

from __future__ import annotations

from datetime import timedelta

import psycopg

from tickwork.scheduler.runs import start_agent_run
from tickwork.sql.notify import Notifier
from tickwork.scheduler.sweep import sweep_stale
from tickwork.scheduler.tokens import Principal
from tickwork.sql.db import connect
from tests.factories import make_agent, make_tenant
from tests.integration.workers import WorkerProcess, scalar, until

SEND = [{"tool_calls": [{"name": "demo.send_message",
                         "arguments": {"recipient": "ops", "text": "report"}}]},
        {"text": "Sent."}]


async def queue_run_needing_approval(db_url: str) -> str:
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        # demo.send_message is not auto-approved: the run pauses before calling it.
        conn.execute("UPDATE agents SET tools = %s, auto_approve = '{}' WHERE id = %s",
                     (["demo.send_message"], agent))
    conn = await connect(db_url, application_name="tickwork-test")
    try:
        notifier = Notifier(conn)
        run = await start_agent_run(conn, Principal(tenant, True), agent,
                                    run_input={"script": SEND}, timeout_minutes=1,
                                    idempotency_key=None, body_hash="", notifier=notifier)
        await notifier.drain()
    finally:
        await conn.close()
    return str(run["id"])


def pause_rows(db_url: str, run_id: str) -> tuple[int, int, int]:
    """(approvals, saved states, approval_required events) of one execution."""
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM approvals WHERE execution_id = %(id)s),"
            "       (SELECT count(*) FROM run_states WHERE execution_id = %(id)s),"
            "       (SELECT count(*) FROM run_events WHERE execution_id = %(id)s"
            "           AND type = 'approval_required')", {"id": run_id}).fetchone()


async def test_a_worker_dying_between_journaling_a_pause_and_saving_its_state_leaves_no_half(
        db_url, pool):
    run_id = await queue_run_needing_approval(db_url)
    crasher = WorkerProcess(db_url, TICKWORK_FAILPOINTS=(
        "approval.after_pause_before_state_commit=exit"))
    # The failpoint's exit is os._exit(86): a crash inside the pause's transaction.
    assert crasher.process.wait(timeout=120) == 86
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) == "running"
    assert pause_rows(db_url, run_id) == (0, 0, 0)  # the journal, state and approval went together
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0

    deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
    swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (swept.failed, swept.retried) == (1, 1)
    retry = str(scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s", (run_id,)))
    fresh = WorkerProcess(db_url)
    try:
        await until(db_url, "SELECT breadcrumb = 'suspended' FROM executions WHERE id = %s",
                    (retry,))
    finally:
        stopped = fresh.terminate()
    assert stopped == 0
    assert pause_rows(db_url, retry) == (1, 1, 1)  # the retry asks once, whole
    assert scalar(db_url, "SELECT status FROM approvals WHERE execution_id = %s",
                  (retry,)) == "pending"
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0  # nothing sent unapproved
