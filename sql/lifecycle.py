"""Execution verdicts shared by both sides: the stale sweep and a worker at its own deadline
give the same verdict through this one function, so retries are minted in exactly one place.
A worker that shuts down with a run unfinished releases it through the same statement (a
retry queued at once), or, for a run resumed after an approval, back to its pause."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tickwork.sql import QUERIES


async def fail_timed_out(conn: AsyncConnection, locked: list[dict[str, Any]],
                         now: datetime | None) -> tuple[int, int]:
    """Fail executions already locked by the caller's transaction; mint one retry each while
    attempts remain. Returns (failed, retried). ``now`` is the sweep's injected clock; a worker
    passes None and goes through the door that takes no date (migration 0041)."""
    rows = await _fail_and_retry(conn, locked, None, now, released=False)
    return len(rows), sum(1 for row in rows if row["retry_id"] is not None)


async def _fail_and_retry(conn: AsyncConnection, locked: list[dict[str, Any]],
                          run_token: UUID | None, now: datetime | None, *,
                          released: bool) -> list[dict[str, Any]]:
    if not locked:
        return []
    params = {"ids": [row["id"] for row in locked], "released": released,
              "run_token": run_token}
    if now is None:  # the worker's door: it may not choose a date
        cursor = await conn.execute(QUERIES["update_own_executions_failed"], params)
    else:
        cursor = await conn.execute(QUERIES["update_timed_out_executions_failed"], {**params, "now": now})
    return await cursor.fetchall()


async def release_run(conn: AsyncConnection, execution_id: UUID, run_token: UUID, *,
                      approval_id: str | None = None,
                      saved_state: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Hand an unfinished run on, inside the caller's transaction; None if it is no longer
    this worker's to hand on.

    A fresh run (approval_id None) ends failed with breadcrumb 'released' and its retry (new
    id, attempt + 1, retry_of, one more allowed attempt) is queued now, not at the deadline:
    {"retry_id": …}. A run resumed after a person's decision goes back to its pause — the
    state its resume consumed (``saved_state``) saved again, the decision kept, its resume
    queued again: {"resume": approval_id}."""
    params = {"execution_id": execution_id, "run_token": run_token}
    if approval_id is not None:
        cursor = await conn.execute(QUERIES["update_resumed_execution_released"], {
            **params, "approval_id": approval_id, "state": Jsonb(saved_state),
            "version": saved_state["version"]})
        return {"resume": approval_id} if await cursor.fetchone() else None
    cursor = await conn.execute(QUERIES["lock_running_execution_for_release"], params)
    locked = await cursor.fetchall()
    rows = await _fail_and_retry(conn, locked, run_token, None, released=True)
    return {"retry_id": rows[0]["retry_id"]} if rows else None
