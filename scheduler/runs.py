"""Runs started by a person or a program ("run now" on a schedule, runs of an agent), listed,
cancelled, and the journal a reader of a run may resume from.

Both start through one statement (sql insert_agent_run) and go down the same path as a cron
fire: an execution row and a queue task named by its id; workers are woken once it has
committed, by the process's Notifier (sql/notify.py says why not inside the statement). An
Idempotency-Key makes a retried request return the execution the first request created; the
same key with a different body is refused. A paused agent refuses new runs (409); a draft
agent runs by hand (the tick never fires it).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from tickwork.scheduler.agents import agent_not_found
from tickwork.scheduler.pagination import decode_cursor, page
from tickwork.scheduler.schedules import get_schedule
from tickwork.scheduler.serialize import EVENT_FIELDS, RUN_FIELDS, pick
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, InvalidInput, NotFound
from tickwork.sql.ids import new_id
from tickwork.sql.journal import events_after
from tickwork.sql.notify import Notifier
from tickwork.sql.vocabulary import ShownRunStatus

USAGE_KEYS = ("input_tokens", "output_tokens", "model_calls")
# What a run of an agent started through the API is, however it is written (alone here, or in
# a shared statement: scheduler/run_batch.py).
API_RUN = {"trigger_type": "run", "trigger_source": "api", "max_attempts": 3}


class AgentPaused(Conflict):
    code = "agent_paused"

    def __init__(self, agent_id: object) -> None:
        super().__init__(f"agent {agent_id} is paused and starts no new runs; set its status "
                         f"to active (`tickwork agent apply` or PUT /v1/agents/{agent_id}) "
                         "to run it",
                         agent_id=str(agent_id))


def shown_status(row: dict[str, Any]) -> str:
    """The status a run is shown with: a run waiting for a person is stored completed with the
    breadcrumb 'suspended', and is 'waiting' (it has not finished: DESIGN, waiting is first
    class). sql list_executions and list_schedule_history say the same in SQL."""
    if row.get("status") == "completed" and row.get("breadcrumb") == "suspended":
        return "waiting"
    return row.get("status")


def public_run(row: dict[str, Any]) -> dict[str, Any]:
    run = pick(row, RUN_FIELDS)
    run["status"] = shown_status(row)
    usage = row.get("usage") or {}
    run["usage"] = {key: int(usage.get(key, 0)) for key in USAGE_KEYS}
    return run


def request_hash(route: str, body: Any) -> str:
    canonical = json.dumps([route, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


async def start_agent_run(conn: AsyncConnection, principal: Principal, agent_id: UUID, *,
                          run_input: dict, timeout_minutes: int, idempotency_key: str | None,
                          body_hash: str | None, notifier: Notifier) -> dict:
    """A run of an agent (POST /v1/agents/{id}/runs): trigger run, source api. ``body_hash``
    is needed only with an ``idempotency_key``."""
    return await _start_run(conn, principal, idempotency_key, body_hash, notifier, {
        "agent_id": agent_id, "schedule_id": None, **API_RUN, "timeout_minutes": timeout_minutes,
        "input": Jsonb(run_input)})


async def run_schedule_now(conn: AsyncConnection, principal: Principal, schedule_id: UUID, *,
                           idempotency_key: str | None, body_hash: str,
                           notifier: Notifier) -> dict:
    """An execution now, trigger schedule/manual; the schedule itself is left untouched."""
    schedule = await get_schedule(conn, principal, schedule_id)
    return await _start_run(conn, principal, idempotency_key, body_hash, notifier, {
        "agent_id": schedule.agent_id, "schedule_id": schedule.id,
        "trigger_type": "schedule", "trigger_source": "manual",
        "max_attempts": schedule.max_attempts, "timeout_minutes": schedule.timeout_minutes,
        "input": Jsonb(schedule.input)})


async def _start_run(conn: AsyncConnection, principal: Principal, idempotency_key: str | None,
                     body_hash: str | None, notifier: Notifier, fields: dict[str, Any]) -> dict:
    """The one start of a run by hand, one statement (sql insert_agent_run): on a tenant's
    connection it goes in one message with its scope, one implicit transaction, one round
    trip; only a same-key request racing this one reads again."""
    params = {"id": new_id(), "tenant_id": principal.tenant_id, **fields,
              "idempotency_key": idempotency_key,
              "request_hash": body_hash if idempotency_key else None}
    scoped = getattr(conn, "fetch_one_scoped", None)  # a tenant's (the API's TenantConnection)
    if scoped is not None:
        row = await scoped(QUERIES["insert_agent_run"], params)
    else:  # a connection that spans tenants: the statement alone
        row = await (await conn.execute(QUERIES["insert_agent_run"], params)).fetchone()
    if row["agent_status"] is None:
        raise agent_not_found(fields["agent_id"])
    if row["created"]:
        if row["queued"] and conn.info.transaction_status == TransactionStatus.IDLE:
            notifier.tasks_queued("run")  # committed (inside a caller's transaction: polled)
        return public_run(row)
    if row["created"] is False:  # a replayed request, even if the agent is paused since
        return _same_request(row, idempotency_key, body_hash)
    if row["agent_status"] == "paused":
        raise AgentPaused(fields["agent_id"])
    # The key's first request committed after this statement's snapshot: read it now.
    return await _replay(conn, principal, idempotency_key, body_hash)


async def _replay(conn: AsyncConnection, principal: Principal, key: str | None,
                  body_hash: str) -> dict:
    cursor = await conn.execute(QUERIES["get_execution_by_idempotency_key"],
                                {"tenant_id": principal.tenant_id, "idempotency_key": key})
    return _same_request(await cursor.fetchone(), key, body_hash)


def _same_request(row: dict[str, Any], key: str | None, body_hash: str) -> dict:
    if row["request_hash"] != body_hash:
        raise InvalidInput(f"Idempotency-Key {key!r} was already used for a different request "
                           f"(execution {row['id']}); use a new key for a new request",
                           code="idempotency_key_reused", existing_id=str(row["id"]))
    return public_run(row)


async def get_run(conn: AsyncConnection, principal: Principal, run_id: UUID) -> dict:
    cursor = await conn.execute(QUERIES["get_execution"],
                                {"id": run_id, "tenant_id": principal.tenant_id})
    row = await cursor.fetchone()
    if row is None:
        raise NotFound("run", run_id, "list runs with GET /v1/runs")
    return public_run(row)


async def list_runs(conn: AsyncConnection, principal: Principal, *, agent_id: UUID | None,
                    schedule_id: UUID | None, status: ShownRunStatus | None, since: datetime | None,
                    limit: int, cursor: str | None) -> dict[str, Any]:
    """A page of the tenant's runs, newest first, by agent, schedule, status (as shown: 'waiting'
    for a run waiting for a person) and creation time."""
    rows = await (await conn.execute(QUERIES["list_executions"], {
        "tenant_id": principal.tenant_id, "agent_id": agent_id, "schedule_id": schedule_id,
        "status": status, "since": since, "cursor": decode_cursor(cursor),
        "limit": limit + 1})).fetchall()
    return page(rows, limit, public_run)


async def cancel_run(conn: AsyncConnection, principal: Principal, run_id: UUID) -> dict:
    """A queued run, or one waiting for approval, is cancelled at once (the waiting run's
    approvals with it); a running one stops at its next turn boundary, and before an approved
    call it has not started. A run that has ended is a Conflict; another tenant's is not
    found."""
    async with conn.transaction():
        # An approved call the run is making now ends first: a cancel never commits while it
        # runs, so one committed before it means it never runs (worker/cancel_fence.py).
        await conn.execute(QUERIES["lock_approved_call_for_cancel"], {"id": run_id})
        row = await (await conn.execute(QUERIES["update_execution_cancelled"], {
            "id": run_id, "tenant_id": principal.tenant_id})).fetchone()
    if row is None:
        run = await get_run(conn, principal, run_id)  # NotFound when it is not this tenant's
        raise Conflict(f"run {run_id} is {run['status']} and can no longer be cancelled",
                       status=run["status"])
    return public_run(row)


async def check_resumable(conn: AsyncConnection, principal: Principal, run_id: UUID,
                          after: int) -> dict[str, Any]:
    """The run's tail state, when a reader of its journal may start after event ``after``:
    the run is the tenant's and has at least that many events."""
    cursor = await conn.execute(QUERIES["get_execution_tail_state"],
                                {"id": run_id, "tenant_id": principal.tenant_id})
    run = await cursor.fetchone()
    if run is None:
        raise NotFound("run", run_id, "list runs with GET /v1/runs")
    if after > (run["last_seq"] or 0):
        raise InvalidInput(f"after={after} is beyond run {run_id}'s last event "
                           f"({run['last_seq'] or 0}); resume from a seq you received",
                           code="after_beyond_end", field="after")
    return run


async def list_run_events(conn: AsyncConnection, run_id: UUID, after: int) -> list[dict]:
    """The run's stored journal after event ``after``, as the API shows events (check the
    reader's right to the run first: check_resumable)."""
    rows = await events_after(conn, run_id, after, limit=100_000)
    return [pick(row, EVENT_FIELDS) for row in rows]


async def ended_without_terminal_events(conn: AsyncConnection, run_ids: list[UUID]) -> set[UUID]:
    """Which of these runs are gone or ended without a run_complete (one statement)."""
    cursor = await conn.execute(QUERIES["list_execution_statuses"], {"ids": run_ids})
    alive = {row["id"] for row in await cursor.fetchall()
             if row["status"] not in ("failed", "cancelled")}
    return {run_id for run_id in run_ids if run_id not in alive}


async def ended_without_terminal_event(conn: AsyncConnection, run_id: UUID) -> bool:
    """Whether the run is gone or ended without a run_complete (cancelled before it started):
    a tail of it has nothing more to wait for."""
    cursor = await conn.execute(QUERIES["get_execution_status"], {"id": run_id})
    row = await cursor.fetchone()
    return row is None or row["status"] in ("failed", "cancelled")
