"""Numbers over time for the viewer: a tenant's runs per minute, counted by outcome."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from psycopg import AsyncConnection

from tickwork.scheduler.serialize import utc_text
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES


async def runs_per_minute(conn: AsyncConnection, principal: Principal,
                          minutes: int) -> dict[str, Any]:
    """The tenant's runs created in each of the last ``minutes`` minutes (the current one
    included, oldest first, on the database clock), counted by outcome (or ``waiting``,
    ``queued``, ``running`` while they have none). Every minute is listed, empty ones with no
    counts, so a chart needs no gap filling."""
    now = await (await conn.execute(QUERIES["get_current_minute"], {"now": None})).fetchone()
    since = now["minute"] - timedelta(minutes=minutes - 1)
    rows = await (await conn.execute(QUERIES["count_executions_per_minute"], {
        "tenant_id": principal.tenant_id, "since": since})).fetchall()
    counts: dict = {}
    for row in rows:
        counts.setdefault(row["minute"], {})[row["outcome"]] = row["runs"]
    items = [{"minute": utc_text(since + timedelta(minutes=n)),
              "counts": counts.get(since + timedelta(minutes=n), {})} for n in range(minutes)]
    return {"minutes": minutes, "since": utc_text(since), "items": items}
