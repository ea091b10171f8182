"""Claiming ahead (worker/claim_ahead.py): while its slots free quickly a worker claims a few
runs more than it has free slots, and each starts the moment a slot frees. Still each run once,
never more agents at work than slots, nothing claimed ahead for runs that take long, and a stop
releases the runs that never got a slot as new attempts, without their having begun; a run that
waited keeps the deadline its claim gave it. Two tests stop and kill real worker processes in
the middle of a burst they claim ahead for."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import timedelta

import psycopg

from tests.factories import queue_run, queue_runs_at_once, scripted_agent
from tests.integration.test_deploy import opened, row
from tests.integration.test_visible_events import Gate, gated_worker, has_event
from tests.integration.test_worker_runs import events
from tests.integration.workers import WorkerProcess, all_done, run_deps, scalar, until
from tickwork.scheduler.sweep import sweep_stale
from tickwork.worker.claim import claim_queued_runs
from tickwork.worker.run_delivery import DEADLINE_MARGIN_SECONDS, run_claimed
from tickwork.worker.providers.routing import ProviderSettings, build_router

SLOW = {"script": [{"sleep": 30}, {"text": "Finished."}]}


class AtWork:
    """The scripted model's sleep (gated_worker's model), counting the runs inside it at once:
    the agents at work."""

    def __init__(self) -> None:
        self.now = self.most = 0

    async def wait(self, seconds: float) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1


async def test_runs_claimed_ahead_start_as_slots_free_each_once_and_never_past_the_slots(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    runs = 300
    # Short runs: slots free fast.
    queue_runs_at_once(db_url, agent, runs, script=[{"sleep": 0.002}, {"text": "ok"}])
    at_work = AtWork()
    async with gated_worker(pool, db_url, model=at_work, concurrency=2) as worker:
        await until(db_url, all_done(runs))
    assert worker.claimed_ahead > 0  # some runs were claimed before a slot was free for them
    assert at_work.most == 2  # but no more than two agents were ever at work at once
    counts = scalar(db_url, "SELECT ARRAY["
                    "(SELECT count(*) FROM executions WHERE status = 'completed' AND attempt = 1),"
                    " (SELECT count(*) FROM execution_claims),"
                    " (SELECT count(*) FROM run_events WHERE type = 'run_start'),"
                    " (SELECT count(*) FROM run_events WHERE type = 'run_complete'),"
                    " (SELECT count(*) FROM queue_tasks)]")
    assert counts == [runs, runs, runs, runs, 0]


async def test_a_worker_told_not_to_claims_nothing_ahead_however_fast_its_slots_free(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    runs = 300
    queue_runs_at_once(db_url, agent, runs)
    async with gated_worker(pool, db_url, concurrency=2, claim_ahead=False) as worker:
        await until(db_url, all_done(runs))
    assert worker.claimed_ahead == 0
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == runs


async def test_a_worker_whose_runs_take_long_claims_nothing_ahead(api, pool, db_url):
    agent = await scripted_agent(api, [])
    runs = 3
    queue_runs_at_once(db_url, agent, runs, script=[{"sleep": 0.3}, {"text": "ok"}])
    async with gated_worker(pool, db_url, concurrency=1) as worker:
        await until(db_url, all_done(runs))
    assert worker.claimed_ahead == 0
    # Each run was claimed alone, once the slot was free: the others stayed in the queue for
    # any worker meanwhile.
    assert scalar(db_url, "SELECT count(DISTINCT claim_id) FROM execution_claims") == runs


class OneAhead:
    """A sizer that always claims one run ahead (as a worker whose slots free fast does)."""

    def slot_freed(self) -> None:
        pass

    def ahead(self, cap: int) -> int:
        return 1


async def test_a_stop_releases_a_run_claimed_ahead_that_never_got_a_slot_without_its_beginning(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    first, waiting, untouched = [await queue_run(api, agent, SLOW) for _ in range(3)]
    async with gated_worker(pool, db_url, model=Gate(), concurrency=1,
                            shutdown_grace_seconds=0) as worker:
        await until(db_url, *has_event(first, "step_start"), timeout=30)
        worker._ahead = OneAhead()
        worker._wake.set()
        async with asyncio.timeout(30):
            while not worker.claimed_ahead:
                await asyncio.sleep(0.01)
        # Started by its claim, waiting in the worker for the one slot; the third never claimed.
        assert row(db_url, waiting, "status")[0] == "running"
        assert row(db_url, untouched, "status")[0] == "queued"
    # The grace period (none) is over: the run at work is released as before, and the one that
    # waited is released too, having done nothing: no step, a retry queued at once.
    for run_id in (first, waiting):
        assert row(db_url, run_id, "status, breadcrumb") == ("failed", "released")
    assert [e["type"] for e in await events(api, waiting)] == ["run_start", "run_complete"]
    assert (await events(api, waiting))[-1]["payload"]["released"] is True
    assert row(db_url, untouched, "status, attempt") == ("queued", 1)
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'queued'") == 3
    async with gated_worker(pool, db_url, model=opened()):  # nothing is lost
        await until(db_url, "SELECT count(*) = 3 FROM executions WHERE status = 'completed'",
                    timeout=30)
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE retry_of = %s", (waiting,)) == 1


BURST = 5000
SOME_DONE = "SELECT count(*) >= 500 FROM executions WHERE status = 'completed'"


def claimed_ahead(worker: WorkerProcess) -> int:
    """What the worker's last line said it claimed ahead (worker_stopped)."""
    found = re.findall(r"claimed_ahead\W+(\d+)", worker.log())
    assert found, worker.log()
    return int(found[-1])


def each_run_started_once(db_url: str) -> None:
    assert scalar(db_url, "SELECT count(*) FROM (SELECT execution_id FROM run_events"
                          " WHERE type = 'run_start' GROUP BY execution_id"
                          " HAVING count(*) <> 1) twice") == 0
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == \
        scalar(db_url, "SELECT count(*) FROM execution_claims")


async def test_a_worker_process_stopped_while_claiming_ahead_finishes_what_it_took_and_no_more(
        api, db_url):
    agent = await scripted_agent(api, [])
    queue_runs_at_once(db_url, agent, BURST)
    worker = WorkerProcess(db_url, concurrency=4)
    await until(db_url, SOME_DONE)
    assert worker.terminate() == 0
    assert claimed_ahead(worker) > 0
    # Everything it had taken, ahead or not, ended within the grace period; nothing else began.
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE status <> 'queued'") == \
        scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'completed'")
    each_run_started_once(db_url)
    fresh = WorkerProcess(db_url, concurrency=4)
    await until(db_url, all_done(BURST))
    assert fresh.terminate() == 0
    each_run_started_once(db_url)
    assert scalar(db_url, "SELECT count(*) FROM executions") == BURST  # no retry was needed


async def test_a_worker_process_killed_while_claiming_ahead_leaves_its_runs_to_the_sweep_once(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    queue_runs_at_once(db_url, agent, BURST)
    worker = WorkerProcess(db_url, concurrency=4)
    await until(db_url, SOME_DONE)
    worker.kill()  # SIGKILL: runs at work, writing their verdicts or waiting for a slot
    in_hand = scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'running'")
    deadline = scalar(db_url, "SELECT max(deadline) FROM executions")
    swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=BURST)
    assert (swept.failed, swept.retried) == (in_hand, in_hand)
    fresh = WorkerProcess(db_url, concurrency=4)
    await until(db_url, all_done(BURST))  # every run, or its one retry, completed
    assert fresh.terminate() == 0
    each_run_started_once(db_url)
    assert scalar(db_url, "SELECT count(*) FROM executions") == BURST + in_hand
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'failed'"
                          " AND outcome = 'timed_out'") == in_hand
    assert scalar(db_url, "SELECT count(*) FROM executions r JOIN executions o"
                          " ON r.retry_of = o.id WHERE r.status = 'completed'") == in_hand


async def test_a_run_claimed_ahead_keeps_the_deadline_its_claim_gave_it(api, pool, db_url):
    agent = await scripted_agent(api, [])
    run_id = await queue_run(api, agent, SLOW, timeout_minutes=1)
    [run] = await claim_queued_runs(pool, limit=1, worker_id="test")
    # It waited a minute for a slot: its deadline (in the database) has just passed, and its
    # own timer, started only now, must count the minute already gone.
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE executions SET deadline = now() - interval '1 second'"
                     " WHERE id = %s", (run_id,))
    waited = replace(run, waited_seconds=60 + DEADLINE_MARGIN_SECONDS - 0.05)
    deps = run_deps(pool)
    deps.provider = build_router(ProviderSettings(models=""), sleep=Gate().wait)  # never answers
    try:
        result = await asyncio.wait_for(run_claimed(waited, deps), 30)
    finally:
        await deps.journal_writer.close()
    assert result == {"status": "failed", "outcome": "timed_out"}
    assert row(db_url, run_id, "status, outcome") == ("failed", "timed_out")
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE retry_of = %s", (run_id,)) == 1
