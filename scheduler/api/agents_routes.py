"""/v1/agents and POST /v1/agents/{id}/runs."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Header

from tickwork.scheduler import agents
from tickwork.scheduler.agents import (create_agent, delete_agent, get_agent, public_agent,
                                         replace_agent)
from tickwork.scheduler.api.deps import Session, notifier_of, session, settings_of
from tickwork.scheduler.models import AgentIn, RunIn
from tickwork.scheduler.pagination import check_limit
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.sql.notify import Notifier
from tickwork.scheduler.runs import request_hash, start_agent_run

router = APIRouter(prefix="/v1/agents", tags=["agents"])
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


@router.post("", status_code=201)
async def create(body: AgentIn, s: Session = Depends(session),
                 settings: SchedulerSettings = Depends(settings_of)) -> dict:
    return await create_agent(s.conn, s.principal, body, models=settings.model_aliases)


@router.get("")
async def list_agents(limit: int = 50, cursor: str | None = None, name: str | None = None,
                      s: Session = Depends(session)) -> dict:
    return await agents.list_agents(s.conn, s.principal, name=name, limit=check_limit(limit),
                                    cursor=cursor)


@router.get("/{agent_id}")
async def read(agent_id: UUID, s: Session = Depends(session)) -> dict:
    return public_agent(await get_agent(s.conn, s.principal, agent_id))


@router.put("/{agent_id}")
async def replace(agent_id: UUID, body: AgentIn, s: Session = Depends(session),
                  settings: SchedulerSettings = Depends(settings_of)) -> dict:
    return await replace_agent(s.conn, s.principal, agent_id, body,
                               models=settings.model_aliases)


@router.delete("/{agent_id}", status_code=204)
async def delete(agent_id: UUID, s: Session = Depends(session)) -> None:
    await delete_agent(s.conn, s.principal, agent_id)


@router.post("/{agent_id}/runs", status_code=202)
async def run(agent_id: UUID, body: Annotated[RunIn | None, Body()] = None,
              idempotency_key: IdempotencyKey = None,
              s: Session = Depends(session, scope="function"),
              notifier: Notifier = Depends(notifier_of)) -> dict:
    # Served by scheduler/api/run_start.py for well-formed requests; this route describes it
    # in the OpenAPI document and answers everything else (and words every refusal).
    return await start_run(s, agent_id, body, idempotency_key, notifier)


async def start_run(s: Session, agent_id: UUID, body: RunIn | None,
                    idempotency_key: str | None, notifier: Notifier) -> dict:
    """The run start behind both ways in (this route and scheduler/api/run_start.py)."""
    body = body or RunIn()
    # The body's hash is kept only with a key (to refuse the key's reuse for another body).
    body_hash = (None if idempotency_key is None else
                 request_hash(f"agents/{agent_id}/runs", body.model_dump(mode="json")))
    return await start_agent_run(s.conn, s.principal, agent_id, run_input=body.input,
                                 timeout_minutes=body.timeout_minutes,
                                 idempotency_key=idempotency_key, body_hash=body_hash,
                                 notifier=notifier)
