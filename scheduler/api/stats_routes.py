"""/v1/stats: read-only numbers over time for the viewer (runs per minute by outcome)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from tickwork.scheduler.api.deps import Session, session
from tickwork.scheduler.serialize import utc_text
from tickwork.sql import QUERIES

router = APIRouter(prefix="/v1/stats", tags=["stats"])


@router.get("/runs-per-minute")
async def runs_per_minute(minutes: Annotated[int, Query(ge=1, le=1440)] = 60,
                          s: Session = Depends(session)) -> dict:
    """The caller's runs created in each of the last ``minutes`` minutes (the current one
    included, oldest first), counted by outcome (or ``waiting``, ``queued``, ``running`` while
    they have none). Every minute is listed, empty ones with no counts, so a chart needs no
    gap filling."""
    now = (await (await s.conn.execute(QUERIES["get_current_minute"], {"now": None})).fetchone())
    since = now["minute"] - timedelta(minutes=minutes - 1)
    rows = await (await s.conn.execute(QUERIES["count_executions_per_minute"], {
        "tenant_id": s.principal.tenant_id, "since": since})).fetchall()
    counts: dict = {}
    for row in rows:
        counts.setdefault(row["minute"], {})[row["outcome"]] = row["runs"]
    items = [{"minute": utc_text(since + timedelta(minutes=n)),
              "counts": counts.get(since + timedelta(minutes=n), {})} for n in range(minutes)]
    return {"minutes": minutes, "since": utc_text(since), "items": items}
