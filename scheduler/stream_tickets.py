"""Stream tickets: short-lived, single-use credentials for a browser to tail one run.

EventSource sends no headers, so a page asks for a ticket with its token
(POST /v1/runs/{id}/stream-ticket) and puts it in the tail's URL. Only the ticket's hash is
stored; using it deletes it, and it dies with the token that minted it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection

from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import NotFound, Unauthorized

_TICKET_FORMAT = re.compile(r"st_[A-Za-z0-9_-]{43}")


def hash_ticket(ticket: str) -> bytes:
    return hashlib.sha256(ticket.encode()).digest()


async def create_ticket(conn: AsyncConnection, principal: Principal, run_id: UUID,
                        ttl_seconds: int) -> dict[str, Any]:
    cursor = await conn.execute(QUERIES["get_execution"],
                                {"id": run_id, "tenant_id": principal.tenant_id})
    if await cursor.fetchone() is None:
        raise NotFound("run", run_id, "list runs with GET /v1/runs")
    return await mint_ticket(conn, principal, run_id, ttl_seconds)


async def mint_ticket(conn: AsyncConnection, principal: Principal, stream_id: UUID,
                      ttl_seconds: int) -> dict[str, Any]:
    """A ticket for one stream, named by its id: a run's (the caller checked the run is the
    tenant's) or a chat's (scheduler/api/chats_routes.py). Ids are UUIDv7 throughout, so a
    ticket for one stream never opens another."""
    ticket = "st_" + secrets.token_urlsafe(32)
    cursor = await conn.execute(QUERIES["insert_stream_ticket"], {
        "ticket_hash": hash_ticket(ticket), "tenant_id": principal.tenant_id,
        "execution_id": stream_id, "token_id": principal.token_id,
        "ttl_seconds": ttl_seconds})
    row = await cursor.fetchone()
    return {"ticket": ticket, "expires_at": row["expires_at"]}


async def principal_from_ticket(conn: AsyncConnection, ticket: str, run_id: UUID) -> Principal:
    if not _TICKET_FORMAT.fullmatch(ticket):
        raise Unauthorized("the stream ticket is malformed; get one with "
                           "POST /v1/runs/{id}/stream-ticket")
    cursor = await conn.execute(QUERIES["delete_usable_stream_ticket"],  # single use
                                {"ticket_hash": hash_ticket(ticket), "execution_id": run_id})
    row = await cursor.fetchone()
    if row is None:
        raise Unauthorized("the stream ticket is unknown, used, expired, revoked with its "
                           "token, or for another run; get a new one")
    return Principal(tenant_id=row["tenant_id"], is_admin=False, token_id=row["token_id"])
