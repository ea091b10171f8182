"""A claim whose answer never reaches the worker (worker/claim_once_more.py).

A claim lost after it was sent may have committed: it is never sent again, and the runs it
started are asked for by the claim's own id and taken over at once. Without that they would stay
running with nobody at work on them until their deadline. A claim that did not commit leaves its
tasks queued for the next claim. Either way each run is claimed, started and finished once.
Around the claim: its runs are delivered as soon as it answers, so a lease that fails after it
does not strand them; and a worker that stops gives up a claim still out when its grace period
ends (one stuck on a row lock here), which rolls back and leaves its task queued.
"""

from __future__ import annotations

import asyncio

import psycopg

from tests.factories import queue_runs_at_once, scripted_agent
from tests.integration.workers import all_done, claim_row_held, running_worker, scalar, until
from tickwork.sql import failpoints

WAITING_CLAIM = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND"
                 " wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                 " AND query LIKE '%%The one statement that starts fresh runs%%'")


def once_each(db_url: str, runs: int) -> None:
    for event in ("run_start", "run_complete"):
        assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = %s", (event,)) == runs
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == runs
    assert scalar(db_url, "SELECT count(DISTINCT execution_id) FROM run_events") == runs


async def test_the_runs_of_a_committed_claim_whose_answer_was_lost_are_taken_over_at_once(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    queue_runs_at_once(db_url, agent, 5)
    failpoints.arm("claim.after_commit", "lose")  # every claim's answer is lost on its way back
    try:
        async with running_worker(pool, db_url, concurrency=8):
            # Their deadline is minutes away: finished now means taken over, not swept.
            await until(db_url, all_done(5))
    finally:
        failpoints.disarm_all()
    once_each(db_url, 5)
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE attempt > 1") == 0


async def test_a_claim_killed_before_it_committed_leaves_its_tasks_for_the_next_claim(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    [first] = queue_runs_at_once(db_url, agent, 1, age="1 hour")
    queue_runs_at_once(db_url, agent, 3)
    # The claim that picks the first run waits on an uncommitted claim row of it ...
    with claim_row_held(db_url, first) as release:
        async with running_worker(pool, db_url, concurrency=8):
            await until(db_url, f"SELECT count(*) = 1 FROM ({WAITING_CLAIM}) waiting")
            # ... and its connection is killed there: it rolls back, claiming nothing.
            with psycopg.connect(db_url, autocommit=True) as conn:
                [(pid,)] = conn.execute(WAITING_CLAIM).fetchall()
                assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]
            release()
            await until(db_url, all_done(4))
    once_each(db_url, 4)
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0


async def test_a_claims_runs_are_delivered_even_when_the_lease_after_it_fails(api, pool, db_url):
    agent = await scripted_agent(api, [])
    [run] = queue_runs_at_once(db_url, agent, 1)
    with psycopg.connect(db_url) as conn:
        # A resume task is ready, and leasing it fails (a planted fault): the claim takes the
        # run and leaves a slot free, so the lease that follows it goes out, and fails.
        conn.execute("INSERT INTO queue_tasks (name, kind, execution_id)"
                     " VALUES ('planted-resume', 'resume', %s)", (run,))
        conn.execute("ALTER TABLE queue_tasks ADD CONSTRAINT planted_fault"
                     " CHECK (lease_expires_at IS NULL) NOT VALID")
    async with running_worker(pool, db_url, concurrency=2):
        # Its deadline is minutes away: finished now means delivered, not swept.
        await until(db_url, all_done(1))
    once_each(db_url, 1)


async def test_a_stopping_worker_gives_up_a_claim_stuck_on_a_row_lock_after_its_grace_period(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    [held] = queue_runs_at_once(db_url, agent, 1)
    with claim_row_held(db_url, held) as release:
        # running_worker waits 60 s for the stop: a worker that waited for its claim fails it.
        async with running_worker(pool, db_url, concurrency=2, shutdown_grace_seconds=1):
            await until(db_url, f"SELECT count(*) = 1 FROM ({WAITING_CLAIM}) waiting")
        # Stopped: the claim was cancelled in the server and rolled back, claiming nothing.
        assert scalar(db_url, f"SELECT count(*) FROM ({WAITING_CLAIM}) waiting") == 0
        assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (held,)) == "queued"
        assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 1
        release()
    async with running_worker(pool, db_url, concurrency=2):
        await until(db_url, all_done(1))
    once_each(db_url, 1)
