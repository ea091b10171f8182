"""Waits that end: the sweep's reminder and expiry of approvals nobody decided.

A run waiting for a person (completed, breadcrumb 'suspended') is never swept as stale, but it
may not wait forever: once its pending approval is half TICKWORK_APPROVAL_TTL_HOURS old an
``approval.reminder`` webhook is queued (once per approval: its reminded_at is set in the same
statement), and once it is older than the TTL the run ends ``cancelled`` with reason
``expired``, journaled like a person's cancel. Both run in batches through narrow database
functions (migration 0075) that lock with SKIP LOCKED, so sweeps in several schedulers never
remind or expire the same approval twice. ``now`` is the sweep's injected clock (None: the
database's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES


@dataclass
class ExpiryResult:
    reminded: int = 0
    expired: int = 0


async def _in_batches(pool: AsyncConnectionPool, query: str, params: dict,
                      batch_size: int) -> int:
    """Run one batch statement (its own short transaction) until a batch comes back short."""
    total = 0
    while True:
        async with pool.connection() as conn:
            row = await (await conn.execute(QUERIES[query], {**params,
                                                             "limit": batch_size})).fetchone()
        total += row["count"]
        if row["count"] < batch_size:
            return total


async def sweep_waiting(pool: AsyncConnectionPool, *, now: datetime | None, ttl_hours: int,
                        batch_size: int) -> ExpiryResult:
    """Remind approvals halfway through their TTL, then expire the runs of those past it."""
    params = {"now": now, "ttl_hours": ttl_hours}
    reminded = await _in_batches(pool, "update_waiting_approvals_reminded", params, batch_size)
    expired = await _in_batches(pool, "update_waiting_executions_expired", params, batch_size)
    return ExpiryResult(reminded=reminded, expired=expired)
