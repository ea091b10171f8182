"""Worker processes that are killed, stopped, and cut off from a restarting Postgres."""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

import psycopg

from scheduler.runs import start_agent_run
from scheduler.sweep import sweep_stale
from scheduler.tokens import Principal
from sql.db import connect
from sql.migrate import migrate
from tests.integration.factories import make_agent, make_tenant
from tests.integration.workers import WorkerProcess, scalar, until
from worker.tools.publish import publish_catalog


def agent_with_tools(db_url: str, tools: list[str]) -> Principal:
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        conn.execute("UPDATE agents SET tools = %s, auto_approve = %s", (tools, tools))
    return Principal(tenant, True), agent


async def queue_runs(db_url: str, script: list, count: int = 1, timeout_minutes: int = 1,
                     tools=("demo.get_record", "demo.send_message")) -> list[str]:
    principal, agent = agent_with_tools(db_url, list(tools))
    conn = await connect(db_url, application_name="tickwork-test")
    ids = []
    for _ in range(count):
        run = await start_agent_run(conn, principal, agent, run_input={"script": script},
                                    timeout_minutes=timeout_minutes, idempotency_key=None,
                                    body_hash="")
        ids.append(run["id"])
    await conn.close()
    return ids


def journal_types(db_url: str, run_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT seq, type FROM run_events WHERE execution_id = %s ORDER BY seq",
                            (run_id,)).fetchall()


async def test_a_worker_killed_mid_run_is_swept_and_its_retry_runs_once(db_url, pool):
    script = [{"tool_calls": [{"name": "demo.send_message",
                               "arguments": {"recipient": "ops", "text": "report"}}]},
              {"text": "Sent."}]
    [run_id] = await queue_runs(db_url, script)
    stuck = WorkerProcess(db_url, TICKWORK_FAILPOINTS=(
        "run.after_tool_effect_before_tool_complete=sleep:600000"))
    await until(db_url, "SELECT count(*) = 1 FROM demo_outbox")
    stuck.kill()  # SIGKILL between the tool's effect and its tool_complete
    deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
    swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (swept.failed, swept.retried) == (1, 1)
    fresh = WorkerProcess(db_url)
    await until(db_url, "SELECT count(*) = 1 FROM executions WHERE retry_of = %s"
                        " AND status = 'completed'", (run_id,))
    assert fresh.terminate() == 0
    assert scalar(db_url, "SELECT status || '/' || outcome FROM executions WHERE id = %s",
                  (run_id,)) == "failed/timed_out"
    retry = scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s", (run_id,))
    assert str(retry) != run_id
    killed = journal_types(db_url, run_id)
    assert [seq for seq, _ in killed] == list(range(1, len(killed) + 1))  # no gap
    assert killed[0][1] == "run_start" and killed[-1][1] == "run_complete"
    assert [t for _, t in killed].count("run_complete") == 1
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == 2
    # The one duplicated effect R2 predicts for a kill at exactly this point, and no other.
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 2
    assert scalar(db_url, "SELECT count(DISTINCT execution_id) FROM demo_outbox") == 2


async def test_sigterm_lets_runs_finish_within_the_grace_period_then_cancels_and_journals(db_url):
    [quick] = await queue_runs(db_url, [{"sleep": 1}, {"text": "quick"}])
    [slow] = await queue_runs(db_url, [{"sleep": 600}, {"text": "never"}])
    worker = WorkerProcess(db_url, concurrency=2, TICKWORK_SHUTDOWN_GRACE_SECONDS="3")
    await until(db_url, "SELECT count(*) = 2 FROM run_events WHERE type = 'run_start'")
    assert worker.terminate(timeout=60) == 0
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (quick,)) == "completed"
    assert scalar(db_url, "SELECT status || '/' || outcome FROM executions WHERE id = %s",
                  (slow,)) == "cancelled/cancelled"
    assert journal_types(db_url, slow)[-1][1] == "run_complete"
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0


async def test_a_run_past_its_deadline_is_stopped_by_its_worker_and_retried_once(db_url):
    """Waits out a real one-minute deadline (the shortest a run may have)."""
    [run_id] = await queue_runs(db_url, [{"sleep": 600}, {"text": "too late"}], timeout_minutes=1)
    worker = WorkerProcess(db_url, TICKWORK_SHUTDOWN_GRACE_SECONDS="1")
    await until(db_url, "SELECT status = 'failed' FROM executions WHERE id = %s", (run_id,),
                timeout=120)
    assert worker.terminate() == 0
    assert scalar(db_url, "SELECT outcome FROM executions WHERE id = %s", (run_id,)) == "timed_out"
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE retry_of = %s", (run_id,)) == 1
    assert journal_types(db_url, run_id)[-1][1] == "run_complete"


async def test_runs_survive_a_postgres_restart_without_loss_or_repeats():
    root = Path(tempfile.mkdtemp(prefix="tickwork-restart-", dir="/tmp"))
    root.chmod(0o755)  # our own folder: the unprivileged server user must traverse it
    from sql.embedded import start_embedded

    server = start_embedded(root)
    try:
        migrate(server.url)
        publish_catalog(server.url)
        script = [{"sleep": 1}, {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 3}}]},
                  {"sleep": 2}, {"text": "Survived."}]
        ids = await queue_runs(server.url, script, count=8, timeout_minutes=5)
        worker = WorkerProcess(server.url, concurrency=4, TICKWORK_LEASE_SECONDS="5")
        await until(server.url, "SELECT count(*) >= 2 FROM run_events WHERE type = 'run_start'")
        server.stop()  # a fast shutdown with runs mid-journal, then the same server again
        server = start_embedded(root)
        await until(server.url, "SELECT count(*) = 8 FROM executions WHERE status = 'completed'",
                    timeout=180)
        assert worker.terminate() == 0
        for run_id in ids:
            types = [t for _, t in journal_types(server.url, run_id)]
            seqs = [s for s, _ in journal_types(server.url, run_id)]
            assert seqs == list(range(1, len(seqs) + 1))
            assert types.count("run_start") == 1 and types.count("run_complete") == 1
        assert scalar(server.url, "SELECT count(*) FROM executions") == 8  # no retries needed
        assert scalar(server.url, "SELECT count(*) FROM execution_claims") == 8
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
