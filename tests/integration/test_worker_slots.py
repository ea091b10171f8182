"""A worker's slots: a run gives its slot back once its agent is done, so the next run starts
while the verdict is written; no more runs write their verdicts that way at once than there
are slots (or WRITING_FLOOR, for a small worker), so memory stays bounded when the database is
slow to take them; thousands of free slots are filled a bounded claim at a time."""

from __future__ import annotations

import asyncio

import psycopg

from tests.factories import queue_run, queue_runs_at_once, scripted_agent
from tests.integration.workers import all_done, claim_row_held, running_worker, scalar, until
from tickwork.sql import failpoints

ONE_TURN = {"script": [{"text": "ok"}]}


async def test_the_next_run_starts_while_the_last_runs_verdict_is_still_being_written(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    first = await queue_run(api, agent, ONE_TURN)
    failpoints.arm("run.before_complete_commit", "block:verdict")
    try:
        async with running_worker(pool, db_url, concurrency=1):
            await asyncio.wait_for(failpoints.wait_reached("verdict"), 60)
            second = await queue_run(api, agent, ONE_TURN)
            # One slot, and the first run is still writing its verdict: the second starts.
            await until(db_url, "SELECT status = 'running' FROM executions WHERE id = %s",
                        (second,))
            assert scalar(db_url, "SELECT status FROM executions WHERE id = %s",
                          (first,)) == "running"
            failpoints.release("verdict")
            await until(db_url, "SELECT count(*) = 2 FROM executions WHERE status = 'completed'")
    finally:
        failpoints.disarm_all()


async def test_no_more_runs_write_their_verdicts_after_giving_back_their_slots_than_the_cap(
        api, pool, db_url):
    from tickwork.worker.runner import WRITING_FLOOR

    agent = await scripted_agent(api, [])
    runs = WRITING_FLOOR + 8
    queue_runs_at_once(db_url, agent, runs)
    failpoints.arm("run.before_complete_commit", "block:verdict")
    try:
        async with running_worker(pool, db_url, concurrency=2) as worker:
            # WRITING_FLOOR runs gave their slots back (two slots are fewer) and wait at their
            # verdict; two more took the slots and wait there too, holding them.
            await until(db_url, f"SELECT count(*) >= {WRITING_FLOOR + 2} FROM executions"
                        " WHERE status = 'running'")
            await settled(worker, WRITING_FLOOR)  # both slots held: no other run can start
            # from here (one or two claimed ahead may wait for a slot)
            waiting = len(worker._waiting)
            assert waiting <= 2
            assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'running'") \
                == WRITING_FLOOR + 2 + waiting
            assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'queued'") \
                == runs - WRITING_FLOOR - 2 - waiting
            failpoints.release("verdict")
            await until(db_url, all_done(runs))
        assert (worker._holding, worker._writing, len(worker._waiting)) == (0, 0, 0)
    finally:
        failpoints.disarm_all()
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == runs


async def settled(worker, writing: int) -> None:
    """Until the worker holds both its slots, counts ``writing`` verdicts being written and has
    no claim out (its counts then stay as they are while the verdicts are held)."""
    async with asyncio.timeout(30):
        while (worker._holding, worker._writing, worker._asked) != (2, writing, 0):
            await asyncio.sleep(0.01)


async def test_thousands_of_free_slots_are_filled_a_bounded_claim_at_a_time(api, pool, db_url):
    from tickwork.worker.runner import CLAIM_BATCH

    agent = await scripted_agent(api, [])
    runs = 2 * CLAIM_BATCH + 10
    queue_runs_at_once(db_url, agent, runs)
    async with running_worker(pool, db_url, concurrency=runs):
        await until(db_url, all_done(runs))
    # Each claim statement names itself in its claim rows (claim_id).
    sizes = [row[0] for row in psycopg.connect(db_url).execute(
        "SELECT count(*) FROM execution_claims GROUP BY claim_id")]
    assert sum(sizes) == runs and max(sizes) <= CLAIM_BATCH and len(sizes) >= 3


async def test_slots_that_free_while_a_claim_is_in_flight_are_filled_by_other_claims(
        api, pool, db_url):
    from tickwork.worker.runner import CLAIM_BATCH

    agent = await scripted_agent(api, [])
    [first] = queue_runs_at_once(db_url, agent, 1, age="1 hour")  # the oldest: taken first
    queue_runs_at_once(db_url, agent, CLAIM_BATCH + 1)
    # An uncommitted claim row of the first run makes the worker's claim that picks it wait.
    with claim_row_held(db_url, first) as release:
        async with running_worker(pool, db_url, concurrency=CLAIM_BATCH + 1):
            # Claims go out two at a time while the queue is full: whichever of them picked
            # the first run waits on it, and the other claims (the first had slots to spare)
            # take the runs it did not lock, which finish before it returns.
            await until(db_url, "SELECT count(*) >= 2 FROM executions WHERE status = 'completed'")
            assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (first,)) == \
                "queued"
            release()  # the waiting claim goes on
            await until(db_url, all_done(CLAIM_BATCH + 2))
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == CLAIM_BATCH + 2
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == \
        CLAIM_BATCH + 2
