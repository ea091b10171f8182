"""The worker process: N concurrent runs, woken by NOTIFY, with polling as the truth.

LISTEN runs on its own direct connection and is re-established after any error; it only
shortens the wait. Every poll interval the worker looks for tasks anyway, so a lost listener
(or a missed notification) delays work by at most one interval and never loses it.

A stop (SIGTERM) ends claiming at once; claims still out and runs in hand share the grace
period: a claim not answered by its end is cancelled in the server (Postgres away, a row lock
held), and the runs a claim delivered get what is left of it to finish. A run
still going after it is released, never cancelled (only a person cancels): it is interrupted
where it stands (model call or tool), journaled, and handed on at once, as a new attempt any
worker can take, or, if it was resumed after an approval, back to its pause with the decision
kept and its resume queued again. Writing the releases gets a short margin after the grace
period; a release that cannot be written in it (Postgres away) leaves the run to the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import structlog

from tickwork.sql import QUERIES
from tickwork.sql.db import listen_forever
from tickwork.worker.claim_once_more import claim_queued_runs_once_more, lease_tasks_once_more
from tickwork.worker.run_delivery import handle_task, run_claimed
from tickwork.worker.run_wiring import RunDeps

log = structlog.get_logger()
# After the grace period: time to write the releases (one flush and one statement per run).
RELEASE_MARGIN_SECONDS = 5.0
# Runs started per claim. Thousands of free slots are filled a claim at a time, so the event
# loop runs each claim's runs up to their first wait before the next claim's answer comes in:
# its rounds stay short and the journal's writes land in between, instead of one round that
# starts 5,000 runs while their first events wait (step_start stored p99 3 s at 5,000).
CLAIM_BATCH = 256


# Claims in flight at once. While one claim's round trip (and commit) is out, slots that free
# up would wait for it and then for a claim of their own: a second claim takes them meanwhile.
# Only while the queue has work (the last claim came back full); an empty queue gets one.
CLAIMS_IN_FLIGHT = 2


class Worker:
    """Claims work for ``concurrency`` slots until ``stop`` is set, then drains: see the
    module's docstring for what happens to runs still going when the grace period ends."""

    def __init__(self, deps: RunDeps, database_url: str) -> None:
        self.deps, self._url = deps, database_url
        self._wake = asyncio.Event()
        self._active: set[asyncio.Task] = set()  # every delivery, until its last write lands
        self._holding = 0  # deliveries holding a slot: their agent is still at work
        self._writing = 0  # deliveries that gave their slot back and write their verdict
        self._claims: set[asyncio.Task] = set()  # claims in flight
        self._asked = 0  # slots the claims in flight asked for
        self._queue_has_more = True  # the last claim came back full

    async def run(self, stop: asyncio.Event) -> None:
        listener = asyncio.create_task(listen_forever(
            self._url, QUERIES["listen_for_tasks"], application_name="tickwork-worker-listen",
            wake=self._wake, stop=stop, lost_event="listener_lost"))
        stopping = asyncio.create_task(self._wake_on_stop(stop))
        log.info("worker_started", worker_id=self.deps.worker_id,
                 concurrency=self.deps.settings.concurrency)
        try:
            while not stop.is_set():
                # Cleared before looking, so a wake-up that comes while a claim is in flight
                # (a slot freed, a task announced) is not lost: the next wait returns at once.
                self._wake.clear()
                if not self._claim_for_free_slots():
                    await self._idle()
        finally:
            listener.cancel()
            stopping.cancel()
            # One grace period for both: the claims still out, then the runs in hand.
            grace = self.deps.settings.shutdown_grace_seconds
            deadline = asyncio.get_running_loop().time() + grace
            await self._claims_answered(deadline)
            await self._drain(deadline)
            log.info("worker_stopped", worker_id=self.deps.worker_id)

    def _claim_for_free_slots(self) -> bool:
        """Send a claim for the slots no run holds and no claim in flight has asked for
        (CLAIM_BATCH at most), when one may go now. True when one was sent."""
        free = min(self.deps.settings.concurrency - self._holding - self._asked, CLAIM_BATCH)
        in_flight_limit = CLAIMS_IN_FLIGHT if self._queue_has_more else 1
        if free <= 0 or len(self._claims) >= in_flight_limit:
            return False
        self._asked += free
        claim = asyncio.create_task(self._claim(free))
        self._claims.add(claim)
        claim.add_done_callback(self._claims.discard)
        return True

    async def _claim(self, free: int) -> None:
        """Take work for ``free`` slots: fresh runs claimed in one statement first, then leased
        resume tasks, and start delivering each. A claim that comes back full wakes the loop
        for the next; one that does not leaves it waiting for a slot, a task or a poll."""
        runs: list = []
        tasks: list = []
        try:
            # A claim whose connection a restart closed before it was sent runs once more.
            runs = await claim_queued_runs_once_more(self.deps.pool, limit=free,
                                                     worker_id=self.deps.worker_id)
            if runs:  # run_start is committed: delivered now, and their tails learn it at once
                self.deps.journal_writer.notifier.runs_changed(run.id for run in runs)
                self._deliver(run_claimed, runs)
            if len(runs) < free:  # a lease cut short by a stop expires and is delivered again
                tasks = await lease_tasks_once_more(
                    self.deps.pool, limit=free - len(runs),
                    lease_seconds=self.deps.settings.lease_seconds)
                self._deliver(handle_task, tasks)
        except psycopg.Error as exc:  # Postgres restarting: the next poll tries again
            log.warning("lease_failed", error=type(exc).__name__)
            self._queue_has_more = False
            return
        except Exception as exc:  # a fault of ours: said, and the next poll tries again
            log.error("claim_failed", error=f"{type(exc).__name__}: {exc}")
            self._queue_has_more = False
            return
        finally:
            self._asked -= free - len(runs) - len(tasks)  # what was delivered, _deliver took
        self._queue_has_more = len(runs) + len(tasks) == free
        if self._queue_has_more:
            self._wake.set()

    def _deliver(self, deliver, items: list) -> None:
        """Start delivering each item: the slots its claim asked for are now held by them."""
        self._asked -= len(items)
        for work in items:
            slot = _Slot(self)
            self._active.add(asyncio.create_task(self._handle(deliver(work, self.deps,
                                                                      slot.free), slot)))

    async def _handle(self, work, slot: "_Slot") -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a leased task is delivered again; a started run is swept
            log.error("task_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._active.discard(asyncio.current_task())
            slot.done()

    async def _idle(self) -> None:
        """Until a slot frees, a task is announced, the worker is stopped, or a poll is due."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.deps.settings.poll_interval_seconds):
                await self._wake.wait()

    async def _wake_on_stop(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._wake.set()

    async def _claims_answered(self, deadline: float) -> None:
        """Wait for the claims in flight (their runs are delivered as they come) until the
        deadline; then give up on the rest (Postgres away, a claim waiting on a row lock): the
        statement is cancelled, so a claim that had not committed started nothing, and the
        runs of one that committed unanswered are left to the stale sweep."""
        if not self._claims:
            return
        _, late = await asyncio.wait(set(self._claims), timeout=_left(deadline))
        if late:
            log.warning("claims_given_up", count=len(late))
            for claim in late:
                claim.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _drain(self, deadline: float) -> None:
        """Stop claiming; let running agents finish until the grace period's deadline, then
        interrupt each one still going, whose delivery releases it (run_delivery._release); a
        release still unwritten after RELEASE_MARGIN_SECONDS is abandoned to the stale sweep."""
        if not self._active:
            return
        _, pending = await asyncio.wait(set(self._active), timeout=_left(deadline))
        if not pending:
            return
        log.warning("releasing_runs", count=len(pending))
        for task in pending:
            task.cancel()
        _, stuck = await asyncio.wait(pending, timeout=RELEASE_MARGIN_SECONDS)
        for task in stuck:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)


def _left(deadline: float) -> float:
    """Seconds from now to ``deadline`` on the event loop's clock (none once it has passed)."""
    return max(0.0, deadline - asyncio.get_running_loop().time())


class _Slot:
    """One delivery's hold on a slot. A run gives its slot back as soon as its agent is done
    (free), so the next run starts while the verdict is written in the journal's next batch;
    it keeps the slot to the end instead while as many runs as there are slots are already
    writing (memory stays bounded when the database is slow). done: the delivery is over."""

    def __init__(self, worker: Worker) -> None:
        self._worker, self._held, self._writing = worker, True, False
        worker._holding += 1

    def free(self) -> None:
        worker = self._worker
        if self._held and worker._writing < worker.deps.settings.concurrency:
            self._held, self._writing = False, True
            worker._holding -= 1
            worker._writing += 1
            worker._wake.set()

    def done(self) -> None:
        worker = self._worker
        if self._writing:
            self._writing = False
            worker._writing -= 1
        if self._held:
            self._held = False
            worker._holding -= 1
        worker._wake.set()
