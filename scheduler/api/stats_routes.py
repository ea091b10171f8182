"""/v1/stats: read-only numbers over time for the viewer (runs per minute by outcome)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from tickwork.scheduler import stats
from tickwork.scheduler.api.deps import Session, session

router = APIRouter(prefix="/v1/stats", tags=["stats"])


@router.get("/runs-per-minute")
async def runs_per_minute(minutes: Annotated[int, Query(ge=1, le=1440)] = 60,
                          s: Session = Depends(session)) -> dict:
    """The caller's runs created in each of the last ``minutes`` minutes (the current one
    included, oldest first), counted by outcome (or ``waiting``, ``queued``, ``running`` while
    they have none). Every minute is listed, empty ones with no counts, so a chart needs no
    gap filling."""
    return await stats.runs_per_minute(s.conn, s.principal, minutes)
