"""The minute tick's dispatch: due schedules become executions and queue tasks, exactly once.

Layers: FOR UPDATE SKIP LOCKED on the due scan (in batches, two in flight), next_run advanced
in the same transaction that inserts the execution, the queue task named by the execution id in
that same transaction (so it is visible only once the execution is), and a unique index
underneath.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable

from psycopg import AsyncConnection
from psycopg.rows import args_row
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.planner import CronCache, DueSchedule, FirePlan, plan_batch
from tickwork.sql import QUERIES, failpoints
from tickwork.sql.ids import new_id_text
from tickwork.sql.pool import once_more

# Batches in flight at once. One lane alternates: the backend waits while Python plans a batch,
# then Python waits while the backend writes it; with two, one lane's planning overlaps the other
# lane's statement (and two backends share the writing). SKIP LOCKED keeps the lanes' batches
# apart, as it does two dispatchers'.
LANES = 2


@dataclass
class DispatchResult:
    claimed: int = 0
    created: int = 0
    skipped_fires: int = 0
    batches: int = 0
    tick_time: datetime | None = None

    def add(self, other: "DispatchResult") -> None:
        for f in fields(self):
            if f.name != "tick_time":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.tick_time = other.tick_time or self.tick_time


async def dispatch_once(conn: AsyncConnection, *, now: datetime | None, limit: int,
                        missed_limit: int, cache: CronCache | None = None) -> DispatchResult:
    """Claim one batch of due schedules and fire them, in one transaction."""
    async with conn.transaction():
        schedules = await claim_due(conn, now=now, limit=limit)
        if not schedules:
            return DispatchResult(batches=1)
        plans = plan_batch(schedules, cache or CronCache(), new_id=new_id_text,
                           missed_limit=missed_limit)
        cursor = await conn.execute(QUERIES["update_claimed_schedules"], batch_params(plans))
        counts = await cursor.fetchone()
        await failpoints.hit("tick.after_insert_before_commit")
    await failpoints.hit("tick.after_commit_before_dispatch")
    return DispatchResult(claimed=len(schedules), created=counts["created"],
                          skipped_fires=counts["skipped"], batches=1,
                          tick_time=schedules[0].tick_time)


async def claim_due(conn: AsyncConnection, *, now: datetime | None,
                    limit: int) -> list[DueSchedule]:
    """Lock one batch of due schedules (in the caller's transaction), each row read straight
    into a DueSchedule: no dict per row."""
    cursor = conn.cursor(row_factory=args_row(DueSchedule))
    await cursor.execute(QUERIES["claim_due_schedules"], {"now": now, "limit": limit})
    return await cursor.fetchall()


async def dispatch_due(pool: AsyncConnectionPool, *, now: datetime | None, batch_size: int,
                       missed_limit: int) -> DispatchResult:
    """Dispatch batches in LANES at once until each lane has had a batch come back short:
    everything due is then handled (what one lane skipped as locked, another lane or another
    dispatcher holds, and writes)."""
    total = DispatchResult()
    cache = CronCache()  # keyed by tick time too, so it stays right across batches

    async def on_a_connection() -> DispatchResult:
        async with pool.connection() as conn:
            return await dispatch_once(conn, now=now, limit=batch_size,
                                       missed_limit=missed_limit, cache=cache)

    async def one_batch() -> bool:
        # A batch whose connection was found closed before it sent anything (a restart) runs
        # on a fresh one, whatever the other lane has done: this batch did nothing.
        batch = await once_more(on_a_connection, name="tick_batch")
        total.add(batch)
        return batch.claimed == batch_size

    await in_lanes(LANES, one_batch)
    return total


async def in_lanes(lanes: int, one_batch: Callable[[], Awaitable[bool]]) -> None:
    """Run ``one_batch`` in ``lanes`` loops at once, each until its batch comes back short
    (False). A lane that fails stops; the others go on to their end (a TaskGroup would cancel
    them mid-transaction), and then the first failure is raised."""
    async def lane() -> None:
        while await one_batch():
            pass

    ended = await asyncio.gather(*(lane() for _ in range(lanes)), return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome


def batch_params(plans: list[FirePlan]) -> dict[str, Any]:
    """Column arrays for update_claimed_schedules's unnest().

    Measured at 10,000 due schedules: uuids and timestamps go as Python lists, which psycopg
    dumps in binary (in C, about a tenth of the time of formatting their text); execution ids
    (minted as text), counts and reason words go as joined array literals, none of which needs
    quoting. Binary timestamps are instants: the session's TimeZone cannot shift them."""
    skipped = [(p.schedule_id, s) for p in plans for s in p.skipped]
    return {
        "schedule_ids": [p.schedule_id for p in plans],
        "next_runs": [p.next_run for p in plans],
        "fire_ats": [p.fire_at for p in plans],
        "execution_ids": _literal(p.execution_id for p in plans),
        "fires": _literal(p.fires for p in plans),
        "skip_schedule_ids": [schedule_id for schedule_id, _ in skipped],
        "skip_times": [s.scheduled_for for _, s in skipped],
        "skip_reasons": _literal(s.reason for _, s in skipped),
        "skip_execution_ids": _literal(s.execution_id for _, s in skipped),
    }


def _literal(values: Iterable[Any]) -> str:
    """A Postgres array literal of unquoted elements; None becomes NULL."""
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
