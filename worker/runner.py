"""The worker process: N concurrent runs, woken by NOTIFY, with polling as the truth.

LISTEN runs on its own direct connection and is re-established after any error; it only
shortens the wait. Every poll interval the worker looks for tasks anyway, so a lost listener
(or a missed notification) delays work by at most one interval and never loses it.

While its slots free quickly, the worker claims a few runs ahead of them (worker/claim_ahead.py):
they wait in the worker, started, and each takes a slot the moment one frees, so no slot waits
for a claim's round trip. They count as runs in hand.

A stop (SIGTERM) ends claiming at once; claims still out and runs in hand share the grace
period: a claim not answered by its end is cancelled in the server (Postgres away, a row lock
held), and the runs a claim delivered get what is left of it to finish (runs claimed ahead
start as slots free; any still waiting at its end are released without having begun). A run
still going after it is released, never cancelled (only a person cancels): it is interrupted
where it stands (model call or tool), journaled, and handed on at once, as a new attempt any
worker can take, or, if it was resumed after an approval, back to its pause with the decision
kept and its resume queued again. Writing the releases gets a short margin after the grace
period; a release that cannot be written in it (Postgres away) leaves the run to the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import replace

import psycopg
import structlog

from tickwork.sql import QUERIES
from tickwork.sql.db import listen_forever
from tickwork.sql.presence import hold_presence
from tickwork.worker.claim import ClaimedRun
from tickwork.worker.claim_ahead import AheadSizer
from tickwork.worker.claim_once_more import claim_queued_runs_once_more, lease_tasks_once_more
from tickwork.worker.run_delivery import handle_task, release_unstarted, run_claimed
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
# up would wait for it and then for a claim of their own: another claim takes them meanwhile.
# Only while the queue has work (the last claim came back full); an empty queue gets one.
# A claim counts until its task's done callback has run, which comes after the first step of
# every run it started, and a lease it sends is part of it: so this is more than the claims
# Postgres works on at once. With three, one or two were (timed claim by claim, 5,000 runs);
# with two, by the same count, about one, and a burst's start waited on each claim's round
# trip. Measured, alternated in one hour (bench/README.md): 5,000 in flight, the last start at
# 0.39-0.44 s against 0.50-0.52 s; 16,000 runs at 16, 4,777-4,884 runs/s against 4,525-4,661.
# A fourth read the same as the third, and so did counting exactly (more claims side by side
# in Postgres, where they contend: a claim of 256 took 13 ms alone, 35-44 ms beside others).
CLAIMS_IN_FLIGHT = 3
# Runs that may give their slots back while their verdicts are written: as many as there are
# slots, and never fewer than this, so that a small worker's next runs do not hold their slots
# waiting for one journal batch (the memory this keeps is a few dozen finished runs).
WRITING_FLOOR = 64


class CountedEvent(asyncio.Event):
    """An event that counts how often it was set, so a claim can tell whether a wake-up came
    while it was out, even one the loop has cleared since."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


class Worker:
    """Claims work for ``concurrency`` slots until ``stop`` is set, then drains: see the
    module's docstring for what happens to runs still going when the grace period ends."""

    def __init__(self, deps: RunDeps, database_url: str) -> None:
        self.deps, self._url = deps, database_url
        self._wake = CountedEvent()
        self._active: set[asyncio.Task] = set()  # every delivery, until its last write lands
        self._holding = 0  # deliveries holding a slot: their agent is still at work
        self._writing = 0  # deliveries that gave their slot back and write their verdict
        self._claims: set[asyncio.Task] = set()  # claims in flight
        self._asked = 0  # runs the claims in flight asked for (free slots and ahead)
        self._queue_has_more = True  # the last claim came back full
        # Deliveries claimed ahead, each waiting for a slot: (deliver, work, claimed at).
        self._waiting: deque[tuple] = deque()
        self._waiting_closed = False  # the grace period is over: nothing more starts
        self._ahead = AheadSizer(time.monotonic)
        self.claimed_ahead = 0  # deliveries that waited for a slot, since the worker started

    async def run(self, stop: asyncio.Event) -> None:
        # The listener's connection also holds the worker's presence (sql/presence.py),
        # kept until the last run is handed on: the sweep must not take the runs of a worker
        # in its grace period for runs lost with a dead one.
        listener = asyncio.create_task(listen_forever(
            self._url, QUERIES["listen_for_tasks"], application_name="tickwork-worker-listen",
            wake=self._wake, stop=stop, lost_event="listener_lost",
            on_connect=lambda conn: hold_presence(conn, self.deps.worker_id)))
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
            stopping.cancel()
            # One grace period for both: the claims still out, then the runs in hand.
            grace = self.deps.settings.shutdown_grace_seconds
            deadline = asyncio.get_running_loop().time() + grace
            try:
                await self._claims_answered(deadline)
                await self._drain(deadline)
            finally:
                listener.cancel()
            log.info("worker_stopped", worker_id=self.deps.worker_id,
                     claimed_ahead=self.claimed_ahead)

    def _claim_for_free_slots(self) -> bool:
        """Send a claim for the slots no run holds or waits for and no claim in flight has
        asked for, and for the runs to claim ahead (CLAIM_BATCH at most), when one may go now.
        True when one was sent."""
        concurrency = self.deps.settings.concurrency
        open_slots = concurrency - self._holding - len(self._waiting) - self._asked
        ahead = (self._ahead.ahead(min(concurrency, CLAIM_BATCH))
                 if self.deps.settings.claim_ahead else 0)
        wanted = min(open_slots + ahead, CLAIM_BATCH)
        in_flight_limit = CLAIMS_IN_FLIGHT if self._queue_has_more else 1
        if wanted <= 0 or len(self._claims) >= in_flight_limit:
            return False
        self._asked += wanted
        claim = asyncio.create_task(self._claim(wanted, leases=max(0, open_slots)))
        self._claims.add(claim)
        claim.add_done_callback(self._claim_done)
        return True

    def _claim_done(self, claim: asyncio.Task) -> None:
        """A claim is no longer in flight: when it asked for another look (a full claim, or a
        wake-up that came while it was out), the loop looks now. Set here, not in the claim,
        since the loop refuses a new claim while this one still counts as in flight."""
        self._claims.discard(claim)
        if not claim.cancelled() and claim.exception() is None and claim.result():
            self._wake.set()

    async def _claim(self, wanted: int, *, leases: int) -> bool:
        """Take up to ``wanted`` deliveries: fresh runs claimed in one statement first, then
        leased resume tasks for the free slots only (``leases``: a lease is never taken ahead),
        and start delivering each. A claim that comes back full wakes the loop for the next;
        one that does not leaves it waiting for a slot, a task or a poll. True: look again
        (_claim_done wakes the loop once this claim no longer counts as in flight)."""
        runs: list = []
        tasks: list = []
        # A wake-up that comes while this claim is out may announce a task the claim was too
        # early to see, and the loop may have cleared it already (it clears before looking):
        # if one came and the claim was not full, the loop looks once more.
        wakes_before = self._wake.sets
        try:
            # A claim whose connection a restart closed before it was sent runs once more.
            runs = await claim_queued_runs_once_more(
                self.deps.pool, limit=wanted, worker_id=self.deps.worker_id,
                tenant_cap=self.deps.settings.tenant_max_concurrent_runs)
            if runs:  # run_start is committed: delivered now, and their tails learn it at once
                self.deps.journal_writer.notifier.runs_changed(run.id for run in runs)
                self._deliver(run_claimed, runs)
            if len(runs) < leases:  # a lease cut short by a stop expires and is delivered again
                tasks = await lease_tasks_once_more(
                    self.deps.pool, limit=leases - len(runs),
                    lease_seconds=self.deps.settings.lease_seconds)
                self._deliver(handle_task, tasks)
        except psycopg.Error as exc:  # Postgres restarting: the next poll tries again
            log.warning("lease_failed", error=type(exc).__name__)
            self._queue_has_more = False
            return False
        except Exception as exc:  # a fault of ours: said, and the next poll tries again
            log.error("claim_failed", error=f"{type(exc).__name__}: {exc}")
            self._queue_has_more = False
            return False
        finally:
            self._asked -= wanted - len(runs) - len(tasks)  # what was delivered, _deliver took
        leases_full = len(runs) < leases and len(runs) + len(tasks) == leases
        self._queue_has_more = len(runs) == wanted or leases_full
        return self._queue_has_more or self._wake.sets != wakes_before

    def _deliver(self, deliver, items: list) -> None:
        """Start delivering each item while a slot is free; the rest (claimed ahead) wait for
        one, in the order they were claimed."""
        self._asked -= len(items)
        claimed_at = time.monotonic()
        for work in items:
            if self._waiting or self._holding >= self.deps.settings.concurrency:
                self._waiting.append((deliver, work, claimed_at))
                self.claimed_ahead += 1
            else:
                self._start(deliver, work)

    def _start(self, deliver, work) -> None:
        slot = _Slot(self)
        self._active.add(asyncio.create_task(self._handle(deliver(work, self.deps, slot.free),
                                                          slot)))

    def _slot_freed(self) -> None:
        """A slot was given back: the longest-waiting run claimed ahead takes it now."""
        self._ahead.slot_freed()
        if self._waiting and not self._waiting_closed:
            deliver, work, claimed_at = self._waiting.popleft()
            if isinstance(work, ClaimedRun):  # its deadline runs from the claim
                work = replace(work, waited_seconds=time.monotonic() - claimed_at)
            self._start(deliver, work)
        self._wake.set()

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
        """Stop claiming; let running agents finish until the grace period's deadline (runs
        claimed ahead start as slots free meanwhile), then interrupt each one still going,
        whose delivery releases it (run_delivery._release), and release the runs still waiting
        for a slot, which never began; a release still unwritten after RELEASE_MARGIN_SECONDS
        is abandoned to the stale sweep."""
        while self._active:  # a delivery that ends may start one that waited: wait for it too
            _, pending = await asyncio.wait(set(self._active), timeout=_left(deadline))
            if pending:
                break
        self._waiting_closed = True  # before any cancel below frees a slot
        pending = set(self._active)
        unstarted = [release_unstarted(work, self.deps) for _, work, _ in self._waiting
                     if isinstance(work, ClaimedRun)]  # a lease not taken up just expires
        self._waiting.clear()
        if not pending and not unstarted:
            return
        log.warning("releasing_runs", count=len(pending), waiting=len(unstarted))
        for task in pending:
            task.cancel()
        releases = pending | {asyncio.create_task(release) for release in unstarted}
        _, stuck = await asyncio.wait(releases, timeout=RELEASE_MARGIN_SECONDS)
        for task in stuck:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*releases, return_exceptions=True)


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
        if self._held and worker._writing < max(worker.deps.settings.concurrency, WRITING_FLOOR):
            self._held, self._writing = False, True
            worker._holding -= 1
            worker._writing += 1
            worker._slot_freed()

    def done(self) -> None:
        worker = self._worker
        if self._writing:
            self._writing = False
            worker._writing -= 1
        if self._held:
            self._held = False
            worker._holding -= 1
            worker._slot_freed()
        else:
            worker._wake.set()
