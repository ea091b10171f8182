"""Execution verdicts shared by both sides: the stale sweep and a worker at its own deadline
give the same verdict through this one function, so retries are minted in exactly one place."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from sql import QUERIES
from sql.ids import new_id


async def fail_timed_out(conn: AsyncConnection, locked: list[dict[str, Any]],
                         now: datetime | None) -> tuple[int, int]:
    """Fail executions already locked by the caller's transaction; mint one retry each while
    attempts remain. Returns (failed, retried)."""
    if not locked:
        return 0, 0
    retry_ids = [new_id() if row["attempt"] < row["max_attempts"] else None for row in locked]
    cursor = await conn.execute(QUERIES["fail_timed_out_executions"], {
        "ids": [row["id"] for row in locked], "retry_ids": retry_ids, "now": now})
    counts = await cursor.fetchone()
    return counts["failed"], counts["retried"]
