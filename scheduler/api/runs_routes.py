"""/v1/runs: what ran, is running or waits, filtered by agent, schedule and status."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request

from tickwork.scheduler import runs
from tickwork.scheduler.api.deps import (Session, hub_of, pool_of, principal_only, session,
                                         settings_of)
from tickwork.scheduler.api.tail import MAX_SEQ, TailResponse, resume_point
from tickwork.scheduler.pagination import check_limit
from tickwork.scheduler.runs import get_run
from tickwork.scheduler.serialize import parse_utc, utc_text
from tickwork.scheduler.stream_tickets import create_ticket, principal_from_ticket
from tickwork.scheduler.tokens import Principal
from tickwork.sql.vocabulary import ShownRunStatus

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.get("")
async def list_runs(limit: int = 50, cursor: str | None = None, agent_id: UUID | None = None,
                    schedule_id: UUID | None = None, status: ShownRunStatus | None = None,
                    since: Annotated[str | None, Query(max_length=40)] = None,
                    s: Session = Depends(session)) -> dict:
    """Runs newest first; ``status=waiting`` lists runs waiting for a person; ``since`` (RFC
    3339 UTC, ending in Z) keeps runs created at or after it."""
    return await runs.list_runs(s.conn, s.principal, agent_id=agent_id, schedule_id=schedule_id,
                                status=status, since=parse_utc(since, "since") if since else None,
                                limit=check_limit(limit), cursor=cursor)


@router.get("/{run_id}")
async def read(run_id: UUID, s: Session = Depends(session)) -> dict:
    return await get_run(s.conn, s.principal, run_id)


@router.get("/{run_id}/events")
async def events(run_id: UUID, request: Request, after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
                 ticket: Annotated[str | None, Query(max_length=100)] = None,
                 last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None):
    """The run's journal: Server-Sent Events that replay and then follow it live (resumable
    with Last-Event-ID or ?after=), or, with Accept: application/json, the stored list."""
    principal = await _tail_principal(request, run_id, ticket)
    resume = resume_point(last_event_id, after)
    async with pool_of(request).connection() as conn:
        await runs.check_resumable(conn, principal, run_id, resume)
        if "application/json" in request.headers.get("accept", ""):
            return {"items": await runs.list_run_events(conn, run_id, resume)}
    return TailResponse(hub_of(request), pool_of(request), run_id, resume,
                        keepalive=settings_of(request).sse_keepalive_seconds,
                        watch=request.app.state.revocation_watch, token_id=principal.token_id)


@router.post("/{run_id}/stream-ticket", status_code=201)
async def stream_ticket(run_id: UUID, request: Request, s: Session = Depends(session)) -> dict:
    """A short-lived ticket to tail this one run, for browsers (EventSource sends no headers)."""
    made = await create_ticket(s.conn, s.principal, run_id,
                               settings_of(request).stream_ticket_ttl_seconds)
    return {"ticket": made["ticket"], "expires_at": utc_text(made["expires_at"])}


async def _tail_principal(request: Request, run_id: UUID, ticket: str | None) -> Principal:
    if ticket is not None and "authorization" not in request.headers:
        async with pool_of(request).connection() as conn:
            return await principal_from_ticket(conn, ticket, run_id)
    return await principal_only(request)  # the connection goes back before streaming


@router.post("/{run_id}/cancel", status_code=202)
async def cancel(run_id: UUID, s: Session = Depends(session)) -> dict:
    """A queued run, or one waiting for approval, is cancelled at once (the waiting run's
    approvals with it); a running one stops at its next turn boundary."""
    return await runs.cancel_run(s.conn, s.principal, run_id)
