"""Schedules: one UTC cron per (agent, cron); run-now; pause/resume; the fire history."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Mapping
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tickwork.scheduler import cron
from tickwork.scheduler.agents import get_agent
from tickwork.scheduler.models import ScheduleIn, SchedulePatch
from tickwork.scheduler.pagination import decode_cursor, page
from tickwork.scheduler.serialize import HISTORY_FIELDS, SCHEDULE_FIELDS, pick
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, NotFound
from tickwork.sql.ids import new_id
from tickwork.sql.vocabulary import Overlap, ScheduleStatus


@dataclass(frozen=True)
class Schedule:
    """A schedule as the services pass it on (the row of get_schedule / lock_schedule)."""

    id: UUID
    tenant_id: UUID
    agent_id: UUID
    cron: str
    timeout_minutes: int
    overlap: Overlap
    max_attempts: int
    display: dict[str, Any] | None
    input: dict[str, Any]
    status: ScheduleStatus
    next_run: datetime
    last_run: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Schedule":
        return cls(**{field.name: row[field.name] for field in fields(cls)})


def public_schedule(row: Schedule | Mapping[str, Any]) -> dict[str, Any]:
    """The contract's JSON shape of a schedule (a typed one, or a listed row)."""
    return pick(vars(row) if isinstance(row, Schedule) else row, SCHEDULE_FIELDS)


def schedule_not_found(schedule_id: object) -> NotFound:
    return NotFound("schedule", schedule_id, "list schedules with GET /v1/schedules")


async def database_now(conn: AsyncConnection):
    cursor = await conn.execute(QUERIES["get_database_now"])
    return (await cursor.fetchone())["now"]


async def create_schedule(conn: AsyncConnection, principal: Principal, body: ScheduleIn) -> dict:
    expression = cron.validate_cron(body.cron)
    async with conn.transaction():
        await get_agent(conn, principal, body.agent_id)
        # next_run comes from the database clock, read in this transaction: one clock.
        next_run = cron.next_fire_after(expression, await database_now(conn))
        cursor = await conn.execute(QUERIES["insert_schedule"], {
            "id": new_id(), "tenant_id": principal.tenant_id, "agent_id": body.agent_id,
            "cron": expression, "timeout_minutes": body.timeout_minutes,
            "overlap": body.overlap, "max_attempts": body.max_attempts,
            "display": Jsonb(body.display.model_dump(exclude_none=True)) if body.display else None,
            "input": Jsonb(body.input), "next_run": next_run})
        row = await cursor.fetchone()
        if row is None:
            await _raise_duplicate(conn, body.agent_id, expression)
    return public_schedule(row)


async def _raise_duplicate(conn: AsyncConnection, agent_id: UUID, expression: str) -> None:
    cursor = await conn.execute(QUERIES["get_schedule_by_agent_cron"],
                                {"agent_id": agent_id, "cron": expression})
    existing = await cursor.fetchone()
    raise Conflict(f"agent {agent_id} already has a schedule with cron {expression!r}: "
                   f"schedule {existing['id']}; change that one or pick another cron",
                   existing_id=str(existing["id"]))


async def get_schedule(conn: AsyncConnection, principal: Principal, schedule_id: UUID,
                       *, lock: bool = False) -> Schedule:
    query = QUERIES["lock_schedule" if lock else "get_schedule"]
    cursor = await conn.execute(query, {"id": schedule_id, "tenant_id": principal.tenant_id})
    row = await cursor.fetchone()
    if row is None:
        raise schedule_not_found(schedule_id)
    return Schedule.from_row(row)


async def list_schedules(conn: AsyncConnection, principal: Principal, *, agent_id: UUID | None,
                         limit: int, cursor: str | None) -> dict[str, Any]:
    """A page of the tenant's schedules, optionally one agent's."""
    rows = await (await conn.execute(QUERIES["list_schedules"], {
        "tenant_id": principal.tenant_id, "agent_id": agent_id,
        "cursor": decode_cursor(cursor), "limit": limit + 1})).fetchall()
    return page(rows, limit, public_schedule)


async def patch_schedule(conn: AsyncConnection, principal: Principal, schedule_id: UUID,
                         body: SchedulePatch) -> dict:
    async with conn.transaction():
        row = await get_schedule(conn, principal, schedule_id, lock=True)
        next_run = row.next_run
        if body.status == "active" and row.status == "paused":
            # Resuming does not replay what was missed while paused: pause means "don't run".
            next_run = cron.next_fire_after(row.cron, await database_now(conn))
        cursor = await conn.execute(QUERIES["update_schedule"], {
            "id": schedule_id, "tenant_id": principal.tenant_id,
            "status": body.status or row.status,
            "timeout_minutes": body.timeout_minutes or row.timeout_minutes,
            "overlap": body.overlap or row.overlap,
            "input": Jsonb(body.input if body.input is not None else row.input),
            "display": Jsonb(row.display) if row.display is not None else None,
            "next_run": next_run})
        return public_schedule(await cursor.fetchone())


async def delete_schedule(conn: AsyncConnection, principal: Principal, schedule_id: UUID) -> None:
    cursor = await conn.execute(QUERIES["delete_schedule"],
                                {"id": schedule_id, "tenant_id": principal.tenant_id})
    if await cursor.fetchone() is None:
        raise schedule_not_found(schedule_id)


async def schedule_history(conn: AsyncConnection, principal: Principal, schedule_id: UUID,
                           limit: int) -> list[dict]:
    await get_schedule(conn, principal, schedule_id)
    cursor = await conn.execute(QUERIES["list_schedule_history"], {
        "id": schedule_id, "tenant_id": principal.tenant_id, "limit": limit})
    return [pick(row, HISTORY_FIELDS) for row in await cursor.fetchall()]
