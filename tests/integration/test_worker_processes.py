"""Worker processes that are killed, stopped, and cut off from a restarting Postgres."""

from __future__ import annotations

import shutil
import socket
import tempfile
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tickwork.scheduler.runs import start_agent_run
from tickwork.sql.notify import Notifier
from tickwork.scheduler.sweep import sweep_stale
from tickwork.scheduler.tokens import Principal
from tickwork.sql.db import connect
from tickwork.sql.migrate import migrate
from tests.factories import make_agent, make_tenant
from tests.integration.workers import WorkerProcess, scalar, until
from tickwork.worker.tools.publish import publish_catalog


def agent_with_tools(db_url: str, tools: list[str], auto_approve: list[str]) -> Principal:
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        conn.execute("UPDATE agents SET tools = %s, auto_approve = %s WHERE id = %s",
                     (tools, auto_approve, agent))
    return Principal(tenant, True), agent


async def queue_runs(db_url: str, script: list, count: int = 1, timeout_minutes: int = 1,
                     tools=("demo.get_record", "demo.send_message"),
                     auto_approve=None) -> list[str]:
    principal, agent = agent_with_tools(db_url, list(tools),
                                        list(tools if auto_approve is None else auto_approve))
    conn = await connect(db_url, application_name="tickwork-test")
    notifier = Notifier(conn)
    ids = []
    for _ in range(count):
        run = await start_agent_run(conn, principal, agent, run_input={"script": script},
                                    timeout_minutes=timeout_minutes, idempotency_key=None,
                                    body_hash="", notifier=notifier)
        ids.append(run["id"])
    await notifier.drain()
    await conn.close()
    return ids


def journal_types(db_url: str, run_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT seq, type FROM run_events WHERE execution_id = %s ORDER BY seq",
                            (run_id,)).fetchall()


def at_last_attempt(db_url: str, run_ids: list[str]) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE executions SET attempt = max_attempts WHERE id = ANY(%s::uuid[])",
                     (run_ids,))


# Whether the worker named in a run's run_start holds its presence lock now.
PRESENCE_OF_WORKER_HOLDING = """
    SELECT EXISTS (SELECT 1 FROM worker_presences p, run_events r
                    WHERE r.execution_id = %s AND r.seq = 1
                      AND p.worker_key = hashtext(r.payload->>'worker_id')::oid)"""


def presence_of_worker_holding(db_url: str, run_id: str) -> bool:
    return scalar(db_url, PRESENCE_OF_WORKER_HOLDING, (run_id,))


async def test_a_worker_killed_mid_run_is_swept_and_its_retry_runs_once(db_url, pool):
    script = [{"tool_calls": [{"name": "demo.send_message",
                               "arguments": {"recipient": "ops", "text": "report"}}]},
              {"text": "Sent."}]
    [run_id] = await queue_runs(db_url, script)
    stuck = WorkerProcess(db_url, TICKWORK_FAILPOINTS=(
        "run.after_tool_effect_before_tool_complete=sleep:600000"))
    await until(db_url, "SELECT count(*) = 1 FROM demo_outbox")
    stuck.kill()  # SIGKILL between the tool's effect and its tool_complete
    await until(db_url, f"SELECT NOT ({PRESENCE_OF_WORKER_HOLDING})", (run_id,))
    deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
    swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (swept.failed, swept.retried) == (1, 1)
    fresh = WorkerProcess(db_url)
    await until(db_url, "SELECT count(*) = 1 FROM executions WHERE retry_of = %s"
                        " AND status = 'completed'", (run_id,))
    assert fresh.terminate() == 0
    assert scalar(db_url, "SELECT status || '/' || outcome FROM executions WHERE id = %s",
                  (run_id,)) == "failed/timed_out"
    # Its worker's presence went with the process: the attempt is given back (migration 0064).
    assert "was gone" in scalar(db_url, "SELECT reason FROM executions WHERE id = %s", (run_id,))
    retry = scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s", (run_id,))
    assert str(retry) != run_id
    assert scalar(db_url, "SELECT r.max_attempts - p.max_attempts FROM executions r"
                          " JOIN executions p ON p.id = r.retry_of WHERE r.id = %s", (retry,)) == 1
    killed = journal_types(db_url, run_id)
    assert [seq for seq, _ in killed] == list(range(1, len(killed) + 1))  # no gap
    assert killed[0][1] == "run_start" and killed[-1][1] == "run_complete"
    assert [t for _, t in killed].count("run_complete") == 1
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == 2
    # The one duplicated effect R2 predicts for a kill at exactly this point, and no other.
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 2
    assert scalar(db_url, "SELECT count(DISTINCT execution_id) FROM demo_outbox") == 2


async def worker_on_a_last_attempt(db_url: str) -> tuple[str, WorkerProcess]:
    """A `tickwork worker` holding one long run at its last attempt, with its presence taken."""
    [run_id] = await queue_runs(db_url, [{"sleep": 600}, {"text": "never"}])
    at_last_attempt(db_url, [run_id])
    worker = WorkerProcess(db_url)
    await until(db_url, "SELECT count(*) = 1 FROM run_events WHERE type = 'run_start'")
    # The worker takes its presence as its LISTEN connection opens, which its first claim may
    # beat by a few milliseconds.
    await until(db_url, PRESENCE_OF_WORKER_HOLDING, (run_id,))
    # Its turn's step_start stored: the run waits on its model, and no append of its own holds
    # the execution's row when the sweep looks (the sweep skips a row that is locked, and
    # would judge nothing).
    await until(db_url, "SELECT count(*) = 1 FROM run_events WHERE type = 'step_start'")
    return run_id, worker


async def test_a_run_lost_with_its_killed_worker_is_retried_even_at_its_last_attempt(db_url, pool):
    run_id, doomed = await worker_on_a_last_attempt(db_url)
    doomed.kill()  # its backends end as they read the closed socket: waited for, not assumed
    await until(db_url, f"SELECT NOT ({PRESENCE_OF_WORKER_HOLDING})", (run_id,))
    deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
    swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (swept.failed, swept.retried) == (1, 1)
    assert scalar(db_url, "SELECT attempt = max_attempts AND workers_lost = 1 FROM executions"
                          " WHERE retry_of = %s", (run_id,))


async def test_a_run_of_a_live_worker_past_its_deadline_counts_its_attempt(db_url, pool):
    run_id, alive = await worker_on_a_last_attempt(db_url)
    deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
    swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (swept.failed, swept.retried) == (1, 0)  # the agent's own timeout: no attempt left
    assert scalar(db_url, "SELECT reason FROM executions WHERE id = %s", (run_id,)).endswith(
        "(attempt 3 of 3)")
    assert alive.terminate() == 0


async def test_a_stopping_worker_keeps_its_presence_through_the_grace_period(db_url):
    [quick] = await queue_runs(db_url, [{"sleep": 1}, {"text": "quick"}])
    [slow] = await queue_runs(db_url, [{"sleep": 600}, {"text": "never"}])
    worker = WorkerProcess(db_url, concurrency=2, TICKWORK_SHUTDOWN_GRACE_SECONDS="60")
    await until(db_url, "SELECT count(*) = 2 FROM run_events WHERE type = 'run_start'")
    await until(db_url, PRESENCE_OF_WORKER_HOLDING, (slow,))
    worker.process.terminate()
    # The quick run ends inside the grace period, while the slow one still runs.
    await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s", (quick,))
    assert worker.process.poll() is None
    assert presence_of_worker_holding(db_url, slow)
    worker.process.kill()
    worker.process.wait(timeout=30)


async def test_sigterm_lets_runs_finish_within_the_grace_period_then_releases_the_rest(db_url):
    [quick] = await queue_runs(db_url, [{"sleep": 1}, {"text": "quick"}])
    [slow] = await queue_runs(db_url, [{"sleep": 600}, {"text": "never"}])
    worker = WorkerProcess(db_url, concurrency=2, TICKWORK_SHUTDOWN_GRACE_SECONDS="3")
    await until(db_url, "SELECT count(*) = 2 FROM run_events WHERE type = 'run_start'")
    assert worker.terminate(timeout=60) == 0
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (quick,)) == "completed"
    assert scalar(db_url, "SELECT status || '/' || outcome || '/' || breadcrumb FROM executions"
                          " WHERE id = %s", (slow,)) == "failed/failed/released"
    assert journal_types(db_url, slow)[-1][1] == "run_complete"
    retry = scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s AND status = 'queued'",
                   (slow,))
    assert scalar(db_url, "SELECT execution_id FROM queue_tasks") == retry  # queued at once
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'cancelled'") == 0


async def test_r10_a_deploy_mid_model_call_and_mid_tool_loses_no_run_and_cancels_none(db_url):
    """RELIABILITY R10: SIGTERM one of two workers while runs are mid-model-call and mid-tool;
    past the short grace period each is released and its retry, queued at once, completes on
    the other worker; a run waiting for approval is untouched."""
    thinking = await queue_runs(db_url, [{"sleep": 1}, {"text": "Thought it through."}],
                                count=2, tools=("demo.get_record",))
    in_tool = await queue_runs(db_url, [{"tool_calls": [{"name": "demo.get_record",
                                                          "arguments": {"id": 7}}]},
                                        {"text": "Read it."}], count=2, tools=("demo.get_record",))
    [waiting] = await queue_runs(db_url, [{"tool_calls": [{
        "name": "demo.send_message", "arguments": {"recipient": "ops", "text": "hi"}}]},
        {"text": "Sent."}], tools=("demo.send_message",), auto_approve=())
    released = thinking + in_tool
    # Worker A holds every run: the thinking runs stay in their model call and the tool runs
    # stop inside their tool call (after its effect), however slow the machine is; their
    # retries on B think for a second and run their tool at once.
    a = WorkerProcess(db_url, concurrency=5, TICKWORK_SHUTDOWN_GRACE_SECONDS="1",
                      TICKWORK_FAILPOINTS="run.after_tool_effect_before_tool_complete=sleep:600000,"
                                          "model.scripted_sleep=sleep:600000")
    await until(db_url, "SELECT (SELECT count(*) FROM run_events WHERE type = 'step_start'"
                        "         AND execution_id = ANY(%s::uuid[])) = 2"
                        " AND (SELECT count(*) FROM run_events WHERE type = 'tool_start'"
                        "         AND execution_id = ANY(%s::uuid[])) = 2"
                        " AND (SELECT breadcrumb = 'suspended' FROM executions WHERE id = %s)",
                (thinking, in_tool, waiting))
    b = WorkerProcess(db_url, concurrency=4)
    assert a.terminate(timeout=60) == 0
    with psycopg.connect(db_url) as conn:  # right after A exited, long before any deadline
        rows = conn.execute(
            "SELECT o.status, o.outcome, o.breadcrumb, r.id IS NOT NULL, r.created_at < o.deadline"
            "  FROM executions o LEFT JOIN executions r ON r.retry_of = o.id"
            " WHERE o.id = ANY(%s::uuid[])", (released,)).fetchall()
    assert rows == [("failed", "failed", "released", True, True)] * 4, (rows, a.log(), b.log())
    await until(db_url, "SELECT count(*) = 4 FROM executions WHERE retry_of = ANY(%s::uuid[])"
                        " AND status = 'completed'", (released,), timeout=120)
    assert b.terminate(timeout=60) == 0
    with psycopg.connect(db_url) as conn:
        for run_id in released:  # one logical run each: exactly one done in its chain
            chain = conn.execute("SELECT status, outcome FROM executions WHERE id = %s"
                                 " OR retry_of = %s ORDER BY attempt", (run_id, run_id)).fetchall()
            assert chain == [("failed", "failed"), ("completed", "done")]
        assert conn.execute("SELECT count(*) FROM executions WHERE status = 'cancelled'"
                            ).fetchone()[0] == 0
        workers = conn.execute(
            "SELECT DISTINCT payload->>'worker_id' FROM run_events r JOIN executions e"
            " ON e.id = r.execution_id WHERE r.type = 'run_start' AND e.retry_of IS NOT NULL"
            ).fetchall()
        [(worker_b,)] = workers  # host:pid:random (tickwork.worker_process.worker_id)
        assert worker_b.startswith(f"{socket.gethostname()}:{b.process.pid}:")
        assert conn.execute("SELECT status, breadcrumb FROM executions WHERE id = %s",
                            (waiting,)).fetchone() == ("completed", "suspended")
        assert conn.execute("SELECT status FROM approvals WHERE execution_id = %s",
                            (waiting,)).fetchone() == ("pending",)
        ids = [str(row[0]) for row in conn.execute("SELECT id FROM executions").fetchall()]
    assert len(ids) == 9  # five runs, four retries, nothing else
    for run_id in ids:
        types = journal_types(db_url, run_id)
        assert [seq for seq, _ in types] == list(range(1, len(types) + 1))  # no gap
        kinds = [t for _, t in types]
        assert kinds.count("run_start") == 1
        if run_id == str(waiting):
            assert kinds[-1] == "approval_required" and "run_complete" not in kinds
        else:
            assert kinds.count("run_complete") == 1 and kinds[-1] == "run_complete"


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
    from tickwork.embedded import start_embedded

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


def worker_sessions(db_url: str) -> int:
    return scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                          " current_database() AND application_name = 'tickwork-worker'")


async def test_tickwork_worker_honours_the_concurrency_and_pool_size_settings(db_url):
    ids = await queue_runs(db_url, [{"sleep": 60}, {"text": "Late."}], count=5)
    worker = WorkerProcess(db_url, concurrency=None, TICKWORK_CONCURRENCY="3",
                           TICKWORK_POOL_MIN_SIZE="5", TICKWORK_POOL_MAX_SIZE="5")
    try:
        # The worker claims at most its free slots in one statement, so 3 start together.
        await until(db_url, "SELECT count(*) >= 3 FROM executions WHERE status = 'running'")
        counts = scalar(db_url, "SELECT array[count(*) FILTER (WHERE status = 'running'),"
                                " count(*) FILTER (WHERE status = 'queued')] FROM executions"
                                " WHERE id = ANY(%s::uuid[])", (ids,))
        assert counts == [3, 2]
        assert worker_sessions(db_url) == 5  # its pool, opened at its minimum: 5
    finally:
        worker.kill()


@pytest.mark.parametrize("flag, env", [(0, {}), (None, {"TICKWORK_CONCURRENCY": "0"}),
                                       (None, {"TICKWORK_POOL_MAX_SIZE": "0"}),
                                       (None, {"TICKWORK_CLAIM_AHEAD": "maybe"}),
                                       (None, {"TICKWORK_PROVIDER_PATIENCE_SECONDS": "-1"})])
def test_tickwork_worker_refuses_bad_settings_in_one_sentence_and_starts_nothing(
        db_url, flag, env):
    worker = WorkerProcess(db_url, concurrency=flag, **env)
    assert worker.process.wait(timeout=60) == 1
    error = " ".join(worker.log().split())  # stdout is empty: it stopped before any log line
    assert error.startswith("error: ")
    assert ("concurrency must be a whole number of at least 1 (got 0)" in error
            or "pool sizes must satisfy" in error
            or "valid boolean, unable to interpret input (TICKWORK_CLAIM_AHEAD)" in error
            or "provider_patience_seconds must be a number of seconds from 0 to 604800 (a "
               "week); got -1.0" in error)
    assert "Traceback" not in error
    assert worker_sessions(db_url) == 0
