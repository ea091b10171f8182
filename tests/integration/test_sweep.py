"""The stale sweep: the only place a retry is minted, fenced against late workers."""

import asyncio
from datetime import datetime, timedelta, timezone
from uuid import UUID

import psycopg
import pytest

from tickwork.scheduler.sweep import sweep_once, sweep_stale
from tickwork.scheduler.tick import run_tick
from tickwork.sql import QUERIES
from tickwork.sql.db import connect
from tickwork.worker.claim import claim_resume
from tickwork.sql.presence import PRESENCE_KEY
from tests.factories import make_agent, make_schedules, make_tenant
from tests.integration.test_run_control import start_by_hand

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


async def running_executions(db_url, pool, settings, n: int, *, max_attempts: int = 3,
                             attempt: int = 1) -> datetime:
    """n executions fired at T0 and marked running as a worker would; returns their deadline."""
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        for i in range(n):
            agent = make_agent(conn, tenant, name=f"agent-{i}")
            make_schedules(conn, tenant, agent, [("* * * * *", T0)], max_attempts=max_attempts,
                           timeout_minutes=1)
    await run_tick(pool, settings, now=T0)
    deadline = T0 + timedelta(minutes=1, seconds=5)
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO run_events (execution_id, seq, type) SELECT id, 1, 'run_start'"
                     " FROM executions")
        conn.execute("UPDATE executions SET status = 'running', attempt = %s, started_at = %s,"
                     " deadline = %s", (attempt, T0 + timedelta(seconds=5), deadline))
        conn.execute("DELETE FROM queue_tasks")
    return deadline


def rows(db_url: str, sql: str, params: tuple = ()) -> list:
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchall()


async def test_a_sweep_one_second_before_the_deadline_touches_nothing(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 3)
    result = await sweep_stale(pool, now=deadline - timedelta(seconds=1), batch_size=10)
    assert (result.failed, result.retried) == (0, 0)
    assert rows(db_url, "SELECT DISTINCT status FROM executions") == [("running",)]


async def test_a_timed_out_run_fails_and_gets_exactly_one_retry_with_a_new_id(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 1)
    result = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (result.failed, result.retried) == (1, 1)
    [(old_id, status, outcome, reason)] = rows(
        db_url, "SELECT id, status, outcome, reason FROM executions WHERE retry_of IS NULL")
    assert (status, outcome) == ("failed", "timed_out") and reason.startswith("timed_out")
    [(new_id, attempt, new_status, scheduled_for)] = rows(
        db_url, "SELECT id, attempt, status, scheduled_for FROM executions WHERE retry_of = %s",
        (old_id,))
    assert new_id != old_id and attempt == 2 and new_status == "queued" and scheduled_for == T0
    assert rows(db_url, "SELECT name FROM queue_tasks") == [(str(new_id),)]
    events = rows(db_url, "SELECT seq, parent_seq, type, payload->>'by' FROM run_events"
                          " WHERE execution_id = %s ORDER BY seq", (old_id,))
    assert events == [(1, None, "run_start", None), (2, 1, "run_complete", "sweep")]


async def test_no_retry_is_minted_once_attempts_are_spent(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 2, max_attempts=3, attempt=3)
    result = await sweep_stale(pool, now=deadline + timedelta(minutes=1), batch_size=10)
    assert (result.failed, result.retried) == (2, 0)
    assert rows(db_url, "SELECT count(*) FROM queue_tasks") == [(0,)]


async def test_two_sweepers_racing_mint_one_retry_per_timed_out_run(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 60)
    later = deadline + timedelta(seconds=30)

    async def drain(name: str) -> list:
        conn = await connect(db_url, application_name=f"tickwork-test-{name}")
        results = []
        while not results or results[-1].failed:
            results.append(await sweep_once(conn, now=later, limit=7))
        await conn.close()
        return results

    a, b = await asyncio.gather(drain("a"), drain("b"))
    assert sum(r.failed for r in a + b) == 60 and sum(r.retried for r in a + b) == 60
    assert rows(db_url, "SELECT count(*) FROM executions WHERE retry_of IS NOT NULL") == [(60,)]
    assert rows(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_complete'") == [(60,)]


async def test_a_late_worker_cannot_overwrite_the_sweeps_verdict(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 1)
    await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    with psycopg.connect(db_url) as conn:
        guarded = conn.execute("UPDATE executions SET status = 'completed', outcome = 'done'"
                               " WHERE retry_of IS NULL AND status = 'running'").rowcount
        assert guarded == 0
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute("UPDATE executions SET status = 'completed' WHERE retry_of IS NULL")
    assert refused.value.diag.constraint_name == "executions_terminal_is_final"
    assert rows(db_url, "SELECT status, outcome FROM executions WHERE retry_of IS NULL") == [
        ("failed", "timed_out")]


async def test_a_run_suspended_for_approval_is_never_swept(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 1)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE executions SET status = 'completed', breadcrumb = 'suspended'")
    result = await sweep_stale(pool, now=deadline + timedelta(minutes=16), batch_size=10)
    assert result.failed == 0
    assert rows(db_url, "SELECT status, breadcrumb FROM executions") == [("completed", "suspended")]


async def test_the_tick_runs_the_sweep(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 4)
    outcome = await run_tick(pool, settings, now=deadline + timedelta(seconds=1))
    assert outcome.ok and outcome.sweep.failed == 4 and outcome.sweep.retried == 4


def claimed_by(db_url: str, worker_id: str) -> None:
    """Every execution's claim row names ``worker_id``, as a worker's claim writes it."""
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO execution_claims (execution_id, worker_id)"
                     " SELECT id, %s FROM executions", (worker_id,))


def presence_held(url: str, worker_id: str) -> psycopg.Connection:
    """A session holding ``worker_id``'s presence lock, as a live worker's LISTEN connection
    does (sql/presence.py); the caller closes it."""
    conn = psycopg.connect(url, autocommit=True)
    held = conn.execute(QUERIES["hold_worker_presence"],
                        {"key": PRESENCE_KEY, "worker_id": worker_id}).fetchone()[0]
    assert held
    return conn


async def test_a_run_lost_with_its_worker_gets_its_attempt_back(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 1, max_attempts=3, attempt=3)
    claimed_by(db_url, "host:4242:dead")  # no session holds its presence: the worker is gone
    result = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (result.failed, result.retried) == (1, 1)
    [(old_id, status, outcome, reason)] = rows(
        db_url, "SELECT id, status, outcome, reason FROM executions WHERE retry_of IS NULL")
    assert (status, outcome) == ("failed", "timed_out")
    assert reason.startswith("timed_out: its worker (host:4242:dead) was gone")
    assert "not counted (1 of 5 given back" in reason
    assert rows(db_url, "SELECT attempt, max_attempts, workers_lost, status FROM executions"
                        " WHERE retry_of = %s", (old_id,)) == [(4, 4, 1, "queued")]
    assert rows(db_url, "SELECT payload->>'by', payload->'worker_lost' FROM run_events"
                        " WHERE execution_id = %s AND type = 'run_complete'",
                (old_id,)) == [("sweep", True)]


async def test_a_run_of_a_worker_still_present_counts_its_attempt(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 1, max_attempts=3, attempt=3)
    claimed_by(db_url, "host:4242:alive")
    with presence_held(db_url, "host:4242:alive"):
        result = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (result.failed, result.retried) == (1, 0)
    [(reason,)] = rows(db_url, "SELECT reason FROM executions")
    assert reason == "timed_out: no result within 1 minutes (attempt 3 of 3)"
    assert rows(db_url, "SELECT payload ? 'worker_lost' FROM run_events"
                        " WHERE type = 'run_complete'") == [(False,)]


async def test_a_presence_held_in_another_database_does_not_count(db_url, pool, settings,
                                                                  pg_server_url):
    deadline = await running_executions(db_url, pool, settings, 1, max_attempts=3, attempt=3)
    claimed_by(db_url, "host:4242:elsewhere")
    with presence_held(pg_server_url, "host:4242:elsewhere"):
        result = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (result.failed, result.retried) == (1, 1)


async def test_a_chain_gets_at_most_five_attempts_back_from_lost_workers(db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 2, max_attempts=3, attempt=3)
    claimed_by(db_url, "host:4242:dead")
    with psycopg.connect(db_url) as conn:  # one run has had 5 attempts back, the other 4
        conn.execute("UPDATE executions SET workers_lost = 5"
                     " WHERE id = (SELECT id FROM executions ORDER BY id LIMIT 1)")
        conn.execute("UPDATE executions SET workers_lost = 4 WHERE workers_lost = 0")
    result = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert (result.failed, result.retried) == (2, 1)
    assert rows(db_url, "SELECT p.workers_lost, p.reason LIKE '%%(attempt 3 of 3)', r.attempt,"
                        " r.max_attempts, r.workers_lost FROM executions p"
                        " LEFT JOIN executions r ON r.retry_of = p.id"
                        " WHERE p.retry_of IS NULL ORDER BY p.workers_lost") == [
        (4, False, 4, 4, 5), (5, True, None, None, None)]


async def test_a_run_lost_with_its_worker_before_its_last_attempt_keeps_its_count(
        db_url, pool, settings):
    deadline = await running_executions(db_url, pool, settings, 1, max_attempts=3, attempt=1)
    claimed_by(db_url, "host:4242:dead")
    await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    assert rows(db_url, "SELECT attempt, max_attempts, workers_lost FROM executions"
                        " WHERE retry_of IS NOT NULL") == [(2, 4, 1)]


async def test_a_resumed_run_is_held_by_the_worker_that_resumed_it(api, db_url, pool):
    """The claim row names the worker that took the run back after its approval, so the sweep
    asks about that worker, not the one that first claimed the run (it may be alive)."""
    run_id, journal = await start_by_hand(api, pool)  # claimed by worker "test"
    approval_id = f"{run_id}:call-1"
    journal.emit("approval_required", {"approval_id": approval_id}, parent=1)
    await journal.suspend(state={"messages": []}, version=1, approval_id=approval_id,
                          tool_call_id="call-1", tool="demo.send_message",
                          arguments={"recipient": "ops", "text": "hi"}, usage=None)
    assert (await api.post(f"/v1/approvals/{approval_id}/approve")).status_code == 200
    with presence_held(db_url, "test"):  # the first claimer is still there
        assert await claim_resume(pool, execution_id=UUID(run_id), task_name=approval_id,
                                  worker_id="host:4242:resumer") is not None
        assert rows(db_url, "SELECT worker_id FROM execution_claims") == [("host:4242:resumer",)]
        [(deadline,)] = rows(db_url, "SELECT deadline FROM executions")
        await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
    [(reason,)] = rows(db_url, "SELECT reason FROM executions WHERE id = %s", (run_id,))
    assert reason.startswith("timed_out: its worker (host:4242:resumer) was gone")
