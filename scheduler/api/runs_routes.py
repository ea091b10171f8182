"""/v1/runs: what ran, is running or waits, filtered by agent, schedule and status."""

from __future__ import annotations

from uuid import UUID

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from scheduler.api.deps import Session, session
from scheduler.pagination import check_limit, decode_cursor, page
from scheduler.runs import get_run, public_run
from scheduler.serialize import EVENT_FIELDS, pick
from sql import QUERIES
from sql.errors import Conflict, NotAcceptable
from sql.journal import events_after
from sql import QUERIES

router = APIRouter(prefix="/v1/runs", tags=["runs"])
RunStatus = Literal["queued", "running", "completed", "failed", "cancelled"]


@router.get("")
async def list_runs(limit: int = 50, cursor: str | None = None, agent_id: UUID | None = None,
                    schedule_id: UUID | None = None, status: RunStatus | None = None,
                    s: Session = Depends(session)) -> dict:
    limit = check_limit(limit)
    rows = await (await s.conn.execute(QUERIES["list_executions"], {
        "tenant_id": s.principal.tenant_id, "agent_id": agent_id, "schedule_id": schedule_id,
        "status": status, "cursor": decode_cursor(cursor), "limit": limit + 1})).fetchall()
    return page(rows, limit, public_run)


@router.get("/{run_id}")
async def read(run_id: UUID, s: Session = Depends(session)) -> dict:
    return await get_run(s.conn, s.principal, run_id)


@router.get("/{run_id}/events")
async def events(run_id: UUID, request: Request, after: Annotated[int, Query(ge=0)] = 0,
                 s: Session = Depends(session)) -> dict:
    """The run's journal in seq order. (The live Server-Sent Events tail is not built yet;
    ask for JSON with Accept: application/json.)"""
    if "application/json" not in request.headers.get("accept", ""):
        raise NotAcceptable("the live event stream (text/event-stream) is not available yet; "
                            "send Accept: application/json for the stored journal")
    await get_run(s.conn, s.principal, run_id)
    rows = await events_after(s.conn, run_id, after, limit=100_000)
    return {"items": [pick(row, EVENT_FIELDS) for row in rows]}


@router.post("/{run_id}/cancel", status_code=202)
async def cancel(run_id: UUID, s: Session = Depends(session)) -> dict:
    """A queued run is cancelled at once; a running one stops at its next turn boundary."""
    async with s.conn.transaction():
        row = await (await s.conn.execute(QUERIES["request_cancel"], {
            "id": run_id, "tenant_id": s.principal.tenant_id})).fetchone()
    if row is None:
        run = await get_run(s.conn, s.principal, run_id)  # 404 when it is not this tenant's
        raise Conflict(f"run {run_id} is {run['status']} and can no longer be cancelled",
                       status=run["status"])
    return public_run(row)
