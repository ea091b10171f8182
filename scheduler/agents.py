"""Agents: definitions a tenant writes; tool keys are checked against the live tool catalog."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import AsyncConnection

from tickwork.scheduler.models import AgentIn
from tickwork.scheduler.pagination import decode_cursor, page
from tickwork.scheduler.serialize import AGENT_FIELDS, pick
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import NotFound, TickworkError
from tickwork.sql.ids import new_id


class UnknownTools(TickworkError):
    code = "unknown_tool"

    def __init__(self, keys: list[str]) -> None:
        super().__init__(f"unknown tool keys: {', '.join(keys)}; list the available tools with "
                         "GET /v1/tools", field="tools", unknown=keys)


class UnknownModel(TickworkError):
    code = "unknown_model"

    def __init__(self, alias: str, known: list[str]) -> None:
        super().__init__(f"model {alias!r} is not an alias this deployment routes "
                         f"(TICKWORK_MODELS routes {', '.join(known)}); use one of those or "
                         "leave model out for the default", field="model", known=known)


def check_model(alias: str | None, known: frozenset[str] | None) -> None:
    """A model alias must be one TICKWORK_MODELS routes, when the API knows them."""
    if alias is not None and known is not None and alias not in known:
        raise UnknownModel(alias, sorted(known))


def public_agent(row: dict[str, Any]) -> dict[str, Any]:
    return pick(row, AGENT_FIELDS)


def agent_not_found(agent_id: object) -> NotFound:
    return NotFound("agent", agent_id, "list agents with GET /v1/agents")


async def check_tools(conn: AsyncConnection, keys: list[str]) -> None:
    if not keys:
        return
    cursor = await conn.execute(QUERIES["list_unknown_tools"], {"keys": sorted(set(keys))})
    unknown = [row["key"] for row in await cursor.fetchall()]
    if unknown:
        raise UnknownTools(unknown)


def _params(body: AgentIn, principal: Principal) -> dict[str, Any]:
    return {"tenant_id": principal.tenant_id, "name": body.name,
            "instructions": body.instructions, "tools": body.tools,
            "auto_approve": body.auto_approve, "status": body.status, "model": body.model,
            "timeout_minutes": body.timeout_minutes, "max_tool_calls": body.max_tool_calls,
            "token_budget": body.token_budget, "max_concurrent_runs": body.max_concurrent_runs}


async def create_agent(conn: AsyncConnection, principal: Principal, body: AgentIn, *,
                       models: frozenset[str] | None = None) -> dict:
    """``models``: the aliases TICKWORK_MODELS routes, or None when the API is not told."""
    check_model(body.model, models)
    await check_tools(conn, body.tools)
    cursor = await conn.execute(QUERIES["insert_agent"], {"id": new_id(), **_params(body, principal)})
    return public_agent(await cursor.fetchone())


async def replace_agent(conn: AsyncConnection, principal: Principal, agent_id: UUID,
                        body: AgentIn, *, models: frozenset[str] | None = None) -> dict:
    check_model(body.model, models)
    await check_tools(conn, body.tools)
    cursor = await conn.execute(QUERIES["update_agent"], {"id": agent_id, **_params(body, principal)})
    row = await cursor.fetchone()
    if row is None:
        raise agent_not_found(agent_id)
    return public_agent(row)


async def get_agent(conn: AsyncConnection, principal: Principal, agent_id: UUID) -> dict:
    cursor = await conn.execute(QUERIES["get_agent"], {"id": agent_id, "tenant_id": principal.tenant_id})
    row = await cursor.fetchone()
    if row is None:
        raise agent_not_found(agent_id)
    return row


async def list_agents(conn: AsyncConnection, principal: Principal, *, name: str | None,
                      limit: int, cursor: str | None) -> dict[str, Any]:
    """A page of the tenant's agents, optionally only the one of that name."""
    rows = await (await conn.execute(QUERIES["list_agents"], {
        "tenant_id": principal.tenant_id, "name": name, "cursor": decode_cursor(cursor),
        "limit": limit + 1})).fetchall()
    return page(rows, limit, public_agent)


async def list_tools(conn: AsyncConnection) -> dict[str, Any]:
    """The live tool catalog an agent's tool keys are checked against (one page: it is small)."""
    rows = await (await conn.execute(QUERIES["list_tools"])).fetchall()
    return {"items": rows, "next_cursor": None}


async def delete_agent(conn: AsyncConnection, principal: Principal, agent_id: UUID) -> None:
    cursor = await conn.execute(QUERIES["delete_agent"], {"id": agent_id, "tenant_id": principal.tenant_id})
    if await cursor.fetchone() is None:
        raise agent_not_found(agent_id)
