"""The worker's claims through a Postgres restart. A claim whose connection the database had
closed before the statement was sent runs once more on a fresh connection: nothing was sent, so
nothing was claimed, and the claim happens now instead of at the next poll
(tickwork.sql.pool.once_more). A claim lost after it was sent may have committed, and is never
sent again: its runs are asked for by the claim's own id (claim.runs_of_lost_claim) and taken
over, so a claim that committed just before a restart does not leave its runs running with
nobody at work on them until their deadline. A connection cut while its claim still runs on a
server that stays up (a network cut) would let the claim commit after the question: the
backend it was sent to is ended first, so the answer to the question is the claim's last word."""

from __future__ import annotations

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql.ids import new_id
from tickwork.sql.pool import connection_lost, once_more
from tickwork.worker.claim import (ClaimedRun, LeasedTask, claim_queued_runs, lease_tasks,
                                   runs_of_lost_claim)

log = structlog.get_logger()


async def claim_queued_runs_once_more(pool: AsyncConnectionPool, *, limit: int,
                                      worker_id: str, tenant_cap: int = 0) -> list[ClaimedRun]:
    claim_id = new_id()
    sent_to: list[int] = []  # each attempt's backend pid; the last one is the claim's
    try:
        return await once_more(lambda: claim_queued_runs(pool, limit=limit, worker_id=worker_id,
                                                         claim_id=claim_id, sent_to=sent_to,
                                                         tenant_cap=tenant_cap),
                               name="claim_queued_runs")
    except psycopg.OperationalError as exc:
        if not connection_lost(exc):
            raise
        runs = await runs_of_lost_claim(pool, claim_id=claim_id, worker_id=worker_id,
                                        sent_to=sent_to[-1] if sent_to else None)
        log.warning("claim_answer_lost", error=type(exc).__name__, runs_taken_over=len(runs))
        return runs


async def lease_tasks_once_more(pool: AsyncConnectionPool, *, limit: int,
                                lease_seconds: int) -> list[LeasedTask]:
    return await once_more(lambda: lease_tasks(pool, limit=limit, lease_seconds=lease_seconds),
                           name="lease_tasks")
