"""/v1/approvals: pending tool calls waiting for a person, and the decision on each."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path

from tickwork.scheduler.api.deps import Session, session
from tickwork.scheduler import approvals
from tickwork.scheduler.approvals import decide
from tickwork.scheduler.models import DecisionIn
from tickwork.scheduler.pagination import check_limit
from tickwork.sql.vocabulary import ApprovalStatus

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
ApprovalId = Annotated[str, Path(max_length=200, pattern=r"^[0-9a-f-]{36}:[A-Za-z0-9_.:-]{1,150}$")]


@router.get("")
async def list_approvals(status: ApprovalStatus | None = None,
                         limit: int = 50, cursor: str | None = None,
                         s: Session = Depends(session)) -> dict:
    return await approvals.list_approvals(s.conn, s.principal, status=status,
                                          limit=check_limit(limit), cursor=cursor)


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
