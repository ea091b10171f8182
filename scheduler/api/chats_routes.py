"""/v1/chats and POST /v1/agents/{id}/chats: conversations with an agent (scheduler/chats.py)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Header, Query, Request

from tickwork.scheduler import chats
from tickwork.scheduler.api.chat_tail import (ChatTailResponse, chat_events, chat_resume_point,
                                               check_chat_resumable)
from tickwork.scheduler.api.deps import (Session, hub_of, notifier_of, pool_of, principal_only,
                                         session, settings_of)
from tickwork.scheduler.models import ChatIn, ChatMessageIn
from tickwork.scheduler.pagination import check_limit
from tickwork.scheduler.serialize import utc_text
from tickwork.scheduler.stream_tickets import mint_ticket, principal_from_ticket
from tickwork.scheduler.tokens import Principal
from tickwork.sql.notify import Notifier

router = APIRouter(tags=["chats"])
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


@router.post("/v1/agents/{agent_id}/chats", status_code=201)
async def create(agent_id: UUID, body: Annotated[ChatIn | None, Body()] = None,
                 s: Session = Depends(session)) -> dict:
    """A new chat with the agent; each message posted to it starts one run."""
    return await chats.create_chat(s.conn, s.principal, agent_id, body or ChatIn())


@router.get("/v1/chats")
async def list_chats(limit: int = 50, cursor: str | None = None, agent_id: UUID | None = None,
                     s: Session = Depends(session)) -> dict:
    """Chats newest first, optionally one agent's."""
    return await chats.list_chats(s.conn, s.principal, agent_id=agent_id,
                                  limit=check_limit(limit), cursor=cursor)


@router.get("/v1/chats/{chat_id}")
async def read(chat_id: UUID, s: Session = Depends(session)) -> dict:
    """The chat and its messages in order (the person's texts and the agent's answers)."""
    return await chats.get_chat(s.conn, s.principal, chat_id)


@router.post("/v1/chats/{chat_id}/messages", status_code=202)
async def post_message(chat_id: UUID, body: ChatMessageIn,
                       idempotency_key: IdempotencyKey = None,
                       s: Session = Depends(session, scope="function"),
                       notifier: Notifier = Depends(notifier_of)) -> dict:
    """A message: starts one run of the chat's agent (trigger chat); 409 chat_busy while the
    chat's run is unfinished."""
    return await chats.post_message(s.conn, s.principal, chat_id, body,
                                    idempotency_key=idempotency_key, notifier=notifier)


@router.get("/v1/chats/{chat_id}/events")
async def events(chat_id: UUID, request: Request,
                 ticket: Annotated[str | None, Query(max_length=100)] = None,
                 last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None):
    """Every run of the chat in order as one stream of Server-Sent Events (ids
    "{run_id}:{seq}", resumable across runs with Last-Event-ID), following the chat live; with
    Accept: application/json, the stored events as a list. A browser passes a ticket from
    POST /v1/chats/{id}/stream-ticket instead of a token."""
    principal = await _stream_principal(request, chat_id, ticket)
    resume = chat_resume_point(last_event_id)
    async with pool_of(request).connection() as conn:
        await chats.check_chat(conn, principal, chat_id)
        await check_chat_resumable(conn, principal, chat_id, resume)
        if "application/json" in request.headers.get("accept", ""):
            return {"items": await chat_events(conn, chat_id, resume)}
    return ChatTailResponse(hub_of(request), pool_of(request), chat_id, resume,
                            keepalive=settings_of(request).sse_keepalive_seconds,
                            watch=request.app.state.revocation_watch,
                            token_id=principal.token_id)


@router.post("/v1/chats/{chat_id}/stream-ticket", status_code=201)
async def stream_ticket(chat_id: UUID, request: Request, s: Session = Depends(session)) -> dict:
    """A short-lived, single-use ticket to follow this one chat's stream, for browsers
    (EventSource sends no headers)."""
    await chats.check_chat(s.conn, s.principal, chat_id)
    made = await mint_ticket(s.conn, s.principal, chat_id,
                             settings_of(request).stream_ticket_ttl_seconds)
    return {"ticket": made["ticket"], "expires_at": utc_text(made["expires_at"])}


async def _stream_principal(request: Request, chat_id: UUID, ticket: str | None) -> Principal:
    if ticket is not None and "authorization" not in request.headers:
        async with pool_of(request).connection() as conn:
            return await principal_from_ticket(conn, ticket, chat_id)
    return await principal_only(request)  # the connection goes back before streaming
