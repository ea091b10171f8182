"""/v1/approvals: pending tool calls waiting for a person, and the decision on each."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path

from tickwork.scheduler.api.deps import Session, session
from tickwork.scheduler.approvals import decide, public_approval
from tickwork.scheduler.models import DecisionIn
from tickwork.scheduler.pagination import check_limit
from tickwork.sql import QUERIES
from tickwork.sql.vocabulary import ApprovalStatus

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
ApprovalId = Annotated[str, Path(max_length=200, pattern=r"^[0-9a-f-]{36}:[A-Za-z0-9_.:-]{1,150}$")]


@router.get("")
async def list_approvals(status: ApprovalStatus | None = None,
                         limit: int = 50, cursor: str | None = None,
                         s: Session = Depends(session)) -> dict:
    limit = check_limit(limit)
    rows = await (await s.conn.execute(QUERIES["list_approvals"], {
        "tenant_id": s.principal.tenant_id, "status": status, "cursor": cursor,
        "limit": limit + 1})).fetchall()
    items = [public_approval(row) for row in rows[:limit]]
    return {"items": items, "next_cursor": items[-1]["id"] if len(rows) > limit else None}


@router.post("/{approval_id}/approve")
async def approve(approval_id: ApprovalId, body: Annotated[DecisionIn | None, Body()] = None,
                  s: Session = Depends(session)) -> dict:
    return await decide(s.conn, s.principal, approval_id, approve=True,
                        reason=body.reason if body else None)


@router.post("/{approval_id}/reject")
async def reject(approval_id: ApprovalId, body: Annotated[DecisionIn | None, Body()] = None,
                 s: Session = Depends(session)) -> dict:
    return await decide(s.conn, s.principal, approval_id, approve=False,
                        reason=body.reason if body else None)
