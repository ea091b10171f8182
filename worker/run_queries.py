"""The worker's own statements about a run besides claiming and journaling: the schedules of a
vanished agent, the tool-call store, and the timeout verdict."""

from __future__ import annotations

from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.lifecycle import fail_timed_out


async def remove_agent_schedules(pool: AsyncConnectionPool, agent_id: UUID) -> None:
    async with pool.connection() as conn:
        await conn.execute(QUERIES["delete_schedules_of_missing_agent"], {"agent_id": agent_id})


async def stored_result(pool: AsyncConnectionPool, execution_id: UUID,
                        call_id: str) -> tuple[str, bool] | None:
    """A call's recorded result and whether it succeeded, or None if it never ran."""
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["get_tool_call_result"],
                                    {"execution_id": execution_id, "tool_call_id": call_id})
        row = await cursor.fetchone()
    return (row["result"], row["ok"]) if row else None


async def store_result(pool: AsyncConnectionPool, execution_id: UUID, call_id: str, text: str,
                       ok: bool) -> None:
    async with pool.connection() as conn:
        await conn.execute(QUERIES["insert_tool_call_result"], {
            "execution_id": execution_id, "tool_call_id": call_id, "result": text, "ok": ok})


async def cancel_requested(pool: AsyncConnectionPool, execution_id: UUID) -> bool:
    """Whether a person asked to stop the run (read afresh, not as the journal last learned it)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["get_execution_cancel_requested"],
                                    {"execution_id": execution_id})
        row = await cursor.fetchone()
    return bool(row and row["cancelled"])


async def fail_if_timed_out(pool: AsyncConnectionPool, execution_id: UUID) -> tuple[int, int]:
    """The sweep's own verdict for this one run if it is past its deadline: (failed, retried)."""
    async with pool.connection() as conn:
        async with conn.transaction():
            cursor = await conn.execute(QUERIES["lock_execution_if_timed_out"],
                                        {"execution_id": execution_id})
            return await fail_timed_out(conn, await cursor.fetchall(), None)
