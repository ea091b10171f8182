"""The demo vendor: reads over a 1,200-record dataset and a send-class message tool whose
effect is a row in demo_outbox, so exactly-once delivery can be counted."""

from __future__ import annotations

from typing import Any, Protocol
from uuid import UUID

from psycopg import AsyncConnection

from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id
from tickwork.worker.tools.registry import tool


class ToolContext(Protocol):
    conn: AsyncConnection
    execution_id: UUID


@tool("read")
async def get_record(ctx: ToolContext, id: int) -> dict[str, Any] | None:
    """Fetch one demo record by id."""
    cursor = await ctx.conn.execute(QUERIES["get_demo_record"], {"id": id})
    return await cursor.fetchone()


@tool("read")
async def list_records(ctx: ToolContext, offset: int = 0, limit: int = 20) -> list[dict[str, Any]]:
    """List demo records in id order."""
    cursor = await ctx.conn.execute(QUERIES["list_demo_records"],
                                    {"offset": max(offset, 0), "limit": max(min(limit, 1000), 0)})
    return await cursor.fetchall()


@tool("read")
async def search_records(ctx: ToolContext, query: str, limit: int = 20) -> list[dict[str, Any]]:
    """Find demo records whose title, category or body contains the query text."""
    cursor = await ctx.conn.execute(QUERIES["list_demo_records_matching"],
                                    {"query": query, "limit": max(min(limit, 1000), 0)})
    return await cursor.fetchall()


@tool("send")
async def send_message(ctx: ToolContext, recipient: str, text: str) -> dict[str, Any]:
    """Deliver a message (a row in demo_outbox)."""
    cursor = await ctx.conn.execute(QUERIES["insert_demo_outbox_message"], {
        "id": new_id(), "execution_id": ctx.execution_id, "recipient": recipient, "text": text})
    row = await cursor.fetchone()
    return {"delivered": True, "message_id": str(row["id"])}
