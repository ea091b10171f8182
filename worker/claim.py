"""Taking work: one statement starts fresh runs; resumes are leased, then taken back once.

A fresh run is started by claim_queued_runs alone: it picks run tasks, inserts each one's
idempotency claim with ON CONFLICT DO NOTHING (claimed nothing means a duplicate delivery, and
no agent code runs) and starts the run, all in one statement. Only resume tasks (named by their
approval id) are leased: a worker that dies before taking the suspended run back leaves a lease
that expires and the task is delivered again; the resume itself happens once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id


@dataclass(frozen=True)
class LeasedTask:
    name: str
    kind: str
    execution_id: UUID
    deliveries: int


@dataclass(frozen=True)
class Claim:
    execution: dict[str, Any] | None  # None: nothing to run
    run_token: UUID | None
    skipped: dict[str, str] | None


async def lease_tasks(pool: AsyncConnectionPool, *, limit: int,
                      lease_seconds: int) -> list[LeasedTask]:
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["lease_queue_tasks"],
                                    {"limit": limit, "lease_seconds": lease_seconds})
        return [LeasedTask(**row) for row in await cursor.fetchall()]


async def claim_resume(pool: AsyncConnectionPool, *, execution_id: UUID,
                       task_name: str) -> Claim:
    """Take a suspended run back to running with a fresh deadline; its saved state and the
    decision come back with it."""
    run_token = new_id()
    async with pool.connection() as conn:
        async with conn.transaction():
            cursor = await conn.execute(QUERIES["claim_resume"], {
                "execution_id": execution_id, "task_name": task_name, "run_token": run_token})
            row = await cursor.fetchone()
    if row is None:
        return Claim(None, None, {"skipped": "duplicate resume"})
    return Claim(row, run_token, None)


async def claim_queued_runs(pool: AsyncConnectionPool, *, limit: int,
                            worker_id: str) -> list[dict[str, Any]]:
    """Claim and start up to ``limit`` fresh runs in one statement (the hot path); each row is
    a started execution with its agent's definition (agent_found is NULL if it is gone)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["claim_queued_runs"],
                                    {"limit": limit, "worker_id": worker_id})
        return await cursor.fetchall()
