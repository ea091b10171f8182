"""The worker's claims, run once more on a fresh connection when the database had closed theirs
before the statement was sent (a Postgres restart): nothing was sent, so nothing was claimed,
and the claim happens now instead of at the next poll. A claim lost after it was sent may have
committed and is not repeated (tickwork.sql.pool.once_more)."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from tickwork.sql.pool import once_more
from tickwork.worker.claim import ClaimedRun, LeasedTask, claim_queued_runs, lease_tasks


async def claim_queued_runs_once_more(pool: AsyncConnectionPool, *, limit: int,
                                      worker_id: str) -> list[ClaimedRun]:
    return await once_more(lambda: claim_queued_runs(pool, limit=limit, worker_id=worker_id),
                           name="claim_queued_runs")


async def lease_tasks_once_more(pool: AsyncConnectionPool, *, limit: int,
                                lease_seconds: int) -> list[LeasedTask]:
    return await once_more(lambda: lease_tasks(pool, limit=limit, lease_seconds=lease_seconds),
                           name="lease_tasks")
