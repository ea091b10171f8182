"""Chats: a durable thread of one agent, each message of a person starting one run.

A message starts its run (trigger chat, source api) through start_chat_message (migration
0082), which starts it with start_agent_run, the one statement of every run start by hand: the
execution row and its queue task together, so the run goes down the same path as any other.
The run's input carries the text as input.message (the model reads it as the person's plain
text) and the chat as input.chat_id; the worker puts the chat's earlier messages before it.
The agent's side of the thread is each run's answer (executions.answer), read from the last
attempt of the run's retry chain, so nothing is written twice.

While the chat's run is unfinished (queued, running, or waiting for a person) another message
is refused with chat_busy naming that run; the chat row is locked while a message is checked
and its run started, so of two messages sent at once exactly one starts a run. A message with
an Idempotency-Key that was used before returns the message that use posted.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from tickwork.scheduler.agents import agent_not_found
from tickwork.scheduler.models import ChatIn, ChatMessageIn
from tickwork.scheduler.pagination import decode_cursor, page
from tickwork.scheduler.runs import AgentPaused, request_hash
from tickwork.scheduler.serialize import jsonable, pick
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, InvalidInput, NotFound
from tickwork.sql.ids import new_id
from tickwork.sql.notify import Notifier

CHAT_FIELDS = ("id", "agent_id", "title", "status", "run_id", "origin_run_id", "created_at",
               "updated_at")
# A chat's run is a run of its agent like any other (retried as a run started by hand is).
CHAT_RUN = {"max_attempts": 3, "timeout_minutes": 5}


class ChatBusy(Conflict):
    code = "chat_busy"

    def __init__(self, chat_id: object, run_id: object) -> None:
        super().__init__(f"chat {chat_id} is still answering: run {run_id} has not finished "
                         f"(it may be waiting for a person); wait for it, or cancel it with "
                         f"POST /v1/runs/{run_id}/cancel, then send the message again",
                         chat_id=str(chat_id), run_id=str(run_id))


class AgentGone(Conflict):
    code = "agent_gone"


def chat_not_found(chat_id: object) -> NotFound:
    return NotFound("chat", chat_id, "list chats with GET /v1/chats")


def public_chat(row: dict[str, Any]) -> dict[str, Any]:
    chat = pick(row, CHAT_FIELDS)
    chat["message_count"] = row.get("last_message_seq", 0)
    return chat


async def create_chat(conn: AsyncConnection, principal: Principal, agent_id: UUID,
                      body: ChatIn) -> dict[str, Any]:
    row = await (await conn.execute(QUERIES["insert_chat"], {
        "id": new_id(), "tenant_id": principal.tenant_id, "agent_id": agent_id,
        "title": body.title})).fetchone()
    if row is None:
        raise agent_not_found(agent_id)
    return public_chat(row)


async def get_chat(conn: AsyncConnection, principal: Principal, chat_id: UUID) -> dict[str, Any]:
    """The chat with its messages: each person's message, then the agent's answer to it once
    its run has one."""
    params = {"id": chat_id, "chat_id": chat_id, "tenant_id": principal.tenant_id}
    row = await (await conn.execute(QUERIES["get_chat"], params)).fetchone()
    if row is None:
        raise chat_not_found(chat_id)
    chat = public_chat(row)
    rows = await (await conn.execute(QUERIES["list_chat_messages"], params)).fetchall()
    chat["messages"] = [said for message in rows for said in _both_sides(message)]
    return chat


async def check_chat(conn: AsyncConnection, principal: Principal, chat_id: UUID) -> None:
    """NotFound unless the chat is the tenant's."""
    row = await (await conn.execute(QUERIES["get_chat"], {
        "id": chat_id, "tenant_id": principal.tenant_id})).fetchone()
    if row is None:
        raise chat_not_found(chat_id)


def _both_sides(row: dict[str, Any]) -> list[dict[str, Any]]:
    said = [{"role": "user", "text": row["text"], "run_id": jsonable(row["run_id"]),
             "message_id": jsonable(row["id"]), "created_at": jsonable(row["created_at"])}]
    if row["answer"] is not None:
        said.append({"role": "agent", "text": row["answer"],
                     "run_id": jsonable(row["answered_by"]), "message_id": jsonable(row["id"]),
                     "created_at": jsonable(row["finished_at"])})
    return said


async def list_chats(conn: AsyncConnection, principal: Principal, *, agent_id: UUID | None,
                     limit: int, cursor: str | None) -> dict[str, Any]:
    rows = await (await conn.execute(QUERIES["list_chats"], {
        "tenant_id": principal.tenant_id, "agent_id": agent_id,
        "cursor": decode_cursor(cursor), "limit": limit + 1})).fetchall()
    return page(rows, limit, public_chat)


async def post_message(conn: AsyncConnection, principal: Principal, chat_id: UUID,
                       body: ChatMessageIn, *, idempotency_key: str | None,
                       notifier: Notifier) -> dict[str, Any]:
    """A person's message and the run it starts: {"message_id", "run_id"} (see the module's
    note). Raises NotFound, ChatBusy, AgentPaused, or InvalidInput for a key reused with
    another body."""
    body_hash = (None if idempotency_key is None else
                 request_hash(f"chats/{chat_id}/messages", body.model_dump(mode="json")))
    run_input = {**body.input, "message": body.text, "chat_id": str(chat_id)}
    params = {"message_id": new_id(), "run_id": new_id(), "tenant_id": principal.tenant_id,
              "chat_id": chat_id, "text": body.text, **CHAT_RUN, "input": Jsonb(run_input),
              "idempotency_key": idempotency_key, "request_hash": body_hash}
    scoped = getattr(conn, "fetch_one_scoped", None)  # a tenant's (the API's TenantConnection)
    if scoped is not None:
        row = await scoped(QUERIES["insert_chat_message"], params)
    else:
        row = await (await conn.execute(QUERIES["insert_chat_message"], params)).fetchone()
    result = row["result"]
    if result == "started":
        if row["queued"] and conn.info.transaction_status == TransactionStatus.IDLE:
            notifier.tasks_queued("run")  # committed
            notifier.runs_changed([chat_id])  # the chat's streams look for the new run
        return _posted(row)
    if result == "no_chat":
        raise chat_not_found(chat_id)
    if result == "busy":
        raise ChatBusy(chat_id, row["busy_run_id"])
    if result == "no_agent":  # the chat's agent was deleted
        raise AgentGone(f"chat {chat_id}'s agent no longer exists; start a chat with "
                        "another agent", chat_id=str(chat_id))
    if result == "paused":
        raise AgentPaused(await _agent_of(conn, principal, chat_id))
    if result == "key_racing":  # the key's first request committed after our snapshot
        row = await (await conn.execute(QUERIES["get_chat_message_by_idempotency_key"], {
            "tenant_id": principal.tenant_id, "idempotency_key": idempotency_key})).fetchone()
        if row is None:
            raise _key_reused(idempotency_key, None)
    if result == "key_used" or row["request_hash"] != body_hash or row["message_id"] is None:
        raise _key_reused(idempotency_key, row["run_id"])
    return _posted(row)  # replayed


def _posted(row: dict[str, Any]) -> dict[str, Any]:
    return {"message_id": jsonable(row["message_id"]), "run_id": jsonable(row["run_id"])}


def _key_reused(key: str | None, run_id: object) -> InvalidInput:
    return InvalidInput(f"Idempotency-Key {key!r} was already used for a different request"
                        f"{f' (execution {run_id})' if run_id else ''}; use a new key for a "
                        "new request", code="idempotency_key_reused",
                        existing_id=None if run_id is None else str(run_id))


async def _agent_of(conn: AsyncConnection, principal: Principal, chat_id: UUID) -> Any:
    row = await (await conn.execute(QUERIES["get_chat"], {
        "id": chat_id, "tenant_id": principal.tenant_id})).fetchone()
    return row["agent_id"] if row else chat_id
