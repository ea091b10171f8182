"""Retention: delete finished history past the horizon, batch after batch within a time budget.

One batch (retention_batch_size runs, found oldest first by executions_finished_idx) is one
short transaction, so a backlog never holds locks for long; the tick keeps taking batches while
they come back full and its budget (retention_budget_seconds) lasts, and always takes at least
one. The budget is a share of the minute (half by default: a worker runs thousands of runs a
second, and retention must delete ten times that), but never past ``ends_by``: the tick ends
before the next minute's starts, or that minute's dispatch would be skipped. The HTTP tick's
retention, inside a request, stops after HTTP_TICK_BUDGET_SECONDS at most. A batch commits
without waiting for the disk: one lost to a crash only brings back rows past the horizon
(migration 0042). A run's journal is dropped with its month, not deleted row
by row, in a young database too: the partition upkeep gives the current month its partition,
and adopts a default partition that holds a month's journal (an install made before 0055) as
that month's partition in two upkeeps, moving no row (migration 0055). The journal's
partitions are managed after the deletes, each change waiting at most
retention_lock_timeout_ms for its lock: one that cannot get it is skipped until the next tick
instead of queueing every journal append behind it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.settings import SchedulerSettings
from tickwork.sql import QUERIES

log = structlog.get_logger()
JOURNAL_MONTHS_AHEAD = 2
# POST /v1/tick does its retention inside the request: kept as short as it always was, whatever
# the budget of the ticks the scheduler runs itself.
HTTP_TICK_BUDGET_SECONDS = 10.0


async def trim_retention(pool: AsyncConnectionPool, settings: SchedulerSettings, *,
                         now: Any | None, clock: Callable[[], float] = time.monotonic,
                         ends_by: float | None = None) -> int:
    """Delete finished runs (with what hangs off them) and skipped-fire records past the
    horizon in batches within the budget, drop whole journal months past it, make the next
    months' partitions ready, and forget stream tickets that expired over an hour ago.
    Returns the number of runs deleted. ``now`` moves the horizon (tests); None is the
    database's clock. ``ends_by`` (on ``clock``): no batch starts after it, budget or not."""
    keep_days = max(settings.retention_days, 0)  # 0 keeps everything
    params = {"now": now, "days": keep_days, "limit": settings.retention_batch_size,
              "months_ahead": JOURNAL_MONTHS_AHEAD,
              "lock_timeout": f"{settings.retention_lock_timeout_ms}ms"}
    deadline = _deadline(clock, settings.retention_budget_seconds, ends_by)
    deleted = 0
    async with pool.connection() as conn:
        if keep_days:
            deleted, batches, full = await _in_batches(
                conn, "delete_finished_executions", params, deadline, clock,
                lambda cursor: cursor.fetchone())
            await _in_batches(conn, "delete_old_skipped_fires", params, deadline, clock,
                              _rowcount)
            _log_backlog(deleted, batches, full)
        async with conn.transaction():
            await conn.execute(QUERIES["set_partition_lock_timeout"], params)
            cursor = await conn.execute(QUERIES["update_journal_partitions"], params)
            changed = await cursor.fetchone()
        await conn.execute(QUERIES["delete_expired_stream_tickets"])
    _log_partitions(changed)
    return deleted


async def upkeep_on_database_clock(pool: AsyncConnectionPool, settings: SchedulerSettings, *,
                                   clock: Callable[[], float] = time.monotonic) -> int:
    """Retention as trim_retention does it, through the one narrow function the API's role may
    call (retention_upkeep, migrations 0029 and 0037): no caller-chosen date, at least 7 days
    kept. Each call is one batch (and the partitions); it is called again while the batch came
    back full and the budget lasts (HTTP_TICK_BUDGET_SECONDS at most: it is inside a request)."""
    params = {"days": max(settings.retention_days, 0), "limit": settings.retention_batch_size}
    deadline = _deadline(clock, min(settings.retention_budget_seconds, HTTP_TICK_BUDGET_SECONDS))
    async with pool.connection() as conn:
        deleted, batches, full = await _in_batches(conn, "delete_expired_history", params, deadline,
                                                   clock, lambda cursor: cursor.fetchone())
    _log_backlog(deleted, batches, full)
    return deleted


def _deadline(clock: Callable[[], float], budget: float, ends_by: float | None = None) -> float:
    deadline = clock() + budget
    return deadline if ends_by is None else min(deadline, ends_by)


async def _in_batches(conn, query: str, params: dict, deadline: float,
                      clock: Callable[[], float], count) -> tuple[int, int, bool]:
    """Run ``query`` (one batch, its own transaction) until a batch is not full or the budget
    is spent; at least once. Returns (rows, batches, whether the last batch was full)."""
    # The functions cap a batch at 10,000 rows; a full batch is judged against the same cap.
    full_batch = min(max(params["limit"], 1), 10_000)
    total = batches = 0
    while True:
        cursor = await conn.execute(QUERIES[query], params)
        got = await count(cursor)
        if isinstance(got, dict):
            got = got["deleted"]
        total += got
        batches += 1
        if got < full_batch or clock() >= deadline:
            return total, batches, got >= full_batch


async def _rowcount(cursor) -> int:
    return cursor.rowcount


def _log_backlog(deleted: int, batches: int, full: bool) -> None:
    if full:  # the budget ran out with more to delete: the next tick carries on
        log.warning("retention_budget_spent", deleted=deleted, batches=batches)
    elif deleted:
        log.info("retention_deleted", deleted=deleted, batches=batches)


def _log_partitions(changed: dict) -> None:
    if changed["created"] or changed["dropped"]:
        log.info("journal_partitions_changed", created=changed["created"],
                 dropped=changed["dropped"])
    skipped = changed["skipped"]
    if skipped == ["busy"]:  # another scheduler is managing them right now
        log.info("journal_partitions_left_to_another_scheduler")
    elif skipped:
        # Their lock was not free within lock_timeout (a long reader of the journal, say);
        # the next tick tries again.
        log.warning("journal_partitions_skipped", skipped=skipped)
