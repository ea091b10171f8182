"""One tick: dispatch what is due, sweep what is stale, end waits past their TTL, trim what
is old.

The tick is never retried: a failure is logged and dropped, and the next tick (a minute later)
re-evaluates everything. (A dispatch batch whose connection was found closed before it sent
anything has done nothing; it is not retried but run on a fresh connection:
scheduler/dispatcher.py. The tick's first statement is such a batch's.) The in-process
APScheduler job, ``tickwork tick`` and ``POST /v1/tick`` all call ``run_tick``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.dispatcher import DispatchResult, dispatch_due
from tickwork.scheduler.expiry import ExpiryResult, sweep_waiting
from tickwork.scheduler.metrics import TICK_DURATION, TICK_FAILURES
from tickwork.scheduler.retention import trim_retention, upkeep_on_database_clock
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.sweep import SweepResult, sweep_stale

log = structlog.get_logger()
# Retention starts no batch later than this into the tick, whatever its budget: the tick must
# end before the next minute's (the in-process job runs one tick at a time and skips a minute
# whose tick finds the last one still running: tickwork/processes.py).
RETENTION_ENDS_BY_SECONDS = 45.0


@dataclass
class TickOutcome:
    ok: bool = True
    dispatch: DispatchResult = field(default_factory=DispatchResult)
    sweep: SweepResult = field(default_factory=SweepResult)
    waiting: ExpiryResult = field(default_factory=ExpiryResult)
    retention_deleted: int = 0
    duration_ms: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        body = asdict(self)
        tick_time = self.dispatch.tick_time
        body["dispatch"]["tick_time"] = tick_time.isoformat() if tick_time else None
        return body


async def run_tick(pool: AsyncConnectionPool, settings: SchedulerSettings, *,
                   now: datetime | None = None, database_clock_retention: bool = False
                   ) -> TickOutcome:
    """Run one whole tick; report failure in the outcome instead of raising.

    ``database_clock_retention``: the HTTP tick runs as the API's role, which may not delete
    history or manage partitions with a date of its choosing; its retention goes through the
    retention_upkeep function on the database clock (``now`` then moves only the dispatch and
    the sweep)."""
    outcome = TickOutcome()
    started = time.perf_counter()
    retention_ends_by = time.monotonic() + RETENTION_ENDS_BY_SECONDS

    try:
        # No retry around the whole tick: each dispatch batch runs once more itself when its
        # connection was found closed before it sent anything (a second layer here would
        # multiply sql/pool.py's ATTEMPTS).
        outcome.dispatch = await dispatch_due(pool, now=now, batch_size=settings.tick_batch_size,
                                              missed_limit=settings.missed_fire_record_limit)
        # The sweep and retention run even on a tick with nothing due, but not after a failed
        # dispatch: the database is likely unreachable and the next tick comes in a minute.
        outcome.sweep = await sweep_stale(pool, now=now, batch_size=settings.sweep_batch_size)
        # Runs waiting for a person: reminded halfway through their TTL, expired past it.
        outcome.waiting = await sweep_waiting(pool, now=now,
                                              ttl_hours=settings.approval_ttl_hours,
                                              batch_size=settings.sweep_batch_size)
        if database_clock_retention:
            outcome.retention_deleted = await upkeep_on_database_clock(pool, settings)
        else:
            outcome.retention_deleted = await trim_retention(pool, settings, now=now,
                                                             ends_by=retention_ends_by)
    except Exception as exc:  # never retried: record why and let the next tick run
        outcome.ok = False
        outcome.error = f"{type(exc).__name__}: {exc}"
        TICK_FAILURES.inc()
        log.error("tick_failed", error=outcome.error)
    outcome.duration_ms = round((time.perf_counter() - started) * 1000, 1)
    TICK_DURATION.observe(outcome.duration_ms / 1000)
    log.info("tick_finished", ok=outcome.ok, claimed=outcome.dispatch.claimed,
             created=outcome.dispatch.created, skipped_fires=outcome.dispatch.skipped_fires,
             timed_out=outcome.sweep.failed, retried=outcome.sweep.retried,
             reminded=outcome.waiting.reminded, expired=outcome.waiting.expired,
             retention_deleted=outcome.retention_deleted, duration_ms=outcome.duration_ms)
    return outcome
