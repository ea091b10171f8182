"""The stale sweep: the only place a retry is minted.

A running execution past its deadline is failed with outcome timed_out, the sweep journals its
terminal event, and while attempts remain a new execution (new id, attempt + 1, retry_of) is
queued in the same transaction. A paused (suspended) run is not 'running', so it is never swept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.lifecycle import fail_timed_out


@dataclass
class SweepResult:
    failed: int = 0
    retried: int = 0


async def sweep_once(conn: AsyncConnection, *, now: datetime | None, limit: int) -> SweepResult:
    """Fail one batch of timed-out executions and mint their retries, in one transaction."""
    async with conn.transaction():
        cursor = await conn.execute(QUERIES["lock_timed_out_executions"],
                                    {"now": now, "limit": limit})
        failed, retried = await fail_timed_out(conn, await cursor.fetchall(), now)
    return SweepResult(failed=failed, retried=retried)


async def sweep_stale(pool: AsyncConnectionPool, *, now: datetime | None,
                      batch_size: int) -> SweepResult:
    total = SweepResult()
    while True:
        async with pool.connection() as conn:
            batch = await sweep_once(conn, now=now, limit=batch_size)
        total.failed += batch.failed
        total.retried += batch.retried
        if batch.failed < batch_size:
            return total
