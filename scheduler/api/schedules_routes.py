"""/v1/schedules, run-now and the fire history."""

from __future__ import annotations

from uuid import UUID

from typing import Annotated

from fastapi import APIRouter, Body, Depends

from tickwork.scheduler.api.agents_routes import IdempotencyKey
from tickwork.scheduler.api.deps import Session, notifier_of, session
from tickwork.scheduler.models import RunNowIn, ScheduleIn, SchedulePatch
from tickwork.scheduler.pagination import check_limit
from tickwork.sql.notify import Notifier
from tickwork.scheduler.runs import request_hash, run_schedule_now
from tickwork.scheduler import schedules
from tickwork.scheduler.schedules import (create_schedule, delete_schedule, get_schedule,
                                          patch_schedule, public_schedule, schedule_history)

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])


@router.post("", status_code=201)
async def create(body: ScheduleIn, s: Session = Depends(session)) -> dict:
    return await create_schedule(s.conn, s.principal, body)


@router.get("")
async def list_schedules(limit: int = 50, cursor: str | None = None,
                         agent_id: UUID | None = None, s: Session = Depends(session)) -> dict:
    return await schedules.list_schedules(s.conn, s.principal, agent_id=agent_id,
                                          limit=check_limit(limit), cursor=cursor)


@router.get("/{schedule_id}")
async def read(schedule_id: UUID, s: Session = Depends(session)) -> dict:
    return public_schedule(await get_schedule(s.conn, s.principal, schedule_id))


@router.patch("/{schedule_id}")
async def patch(schedule_id: UUID, body: SchedulePatch, s: Session = Depends(session)) -> dict:
    return await patch_schedule(s.conn, s.principal, schedule_id, body)


@router.delete("/{schedule_id}", status_code=204)
async def delete(schedule_id: UUID, s: Session = Depends(session)) -> None:
    await delete_schedule(s.conn, s.principal, schedule_id)


@router.post("/{schedule_id}/run-now", status_code=202)
async def run_now(schedule_id: UUID, body: Annotated[RunNowIn | None, Body()] = None,
                  idempotency_key: IdempotencyKey = None, s: Session = Depends(session),
                  notifier: Notifier = Depends(notifier_of)) -> dict:
    return await run_schedule_now(s.conn, s.principal, schedule_id,
                                  idempotency_key=idempotency_key,
                                  body_hash=request_hash(f"schedules/{schedule_id}/run-now", None),
                                  notifier=notifier)


@router.get("/{schedule_id}/history")
async def history(schedule_id: UUID, limit: int = 100, s: Session = Depends(session)) -> dict:
    items = await schedule_history(s.conn, s.principal, schedule_id, check_limit(limit))
    return {"items": items, "next_cursor": None}
