"""Taking work: one statement starts fresh runs; resumes are leased, then taken back once.

A fresh run is started by claim_queued_runs alone: it picks run tasks, inserts each one's
idempotency claim with ON CONFLICT DO NOTHING (claimed nothing means a duplicate delivery, and
no agent code runs) and starts the run, all in one statement. Only resume tasks (named by their
approval id) are leased: a worker that dies before taking the suspended run back leaves a lease
that expires and the task is delivered again; the resume itself happens once.

Either way the worker gets a ClaimedRun, built here from the claim's row and nowhere else: the
rest of the worker reads its attributes, never the row's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES, failpoints
from tickwork.sql.db import HOT_PATH, reconnecting
from tickwork.sql.ids import new_id
from tickwork.sql.vocabulary import ApprovalStatus

log = structlog.get_logger()
RUN_START_SEQ = 1  # claim_queued_runs journals run_start as the run's event 1
# How long a lost claim's question waits for the backend that ran the claim to end.
END_LOST_CLAIM_MS = 5000
# How a claim's text begins as the server shows it (pg_stat_activity.query): up to its first
# parameter, which the driver sends as $1.
CLAIM_PREFIX = QUERIES["claim_queued_executions"].split("%(")[0]


@dataclass(frozen=True)
class LeasedTask:
    name: str
    kind: str
    execution_id: UUID
    deliveries: int


@dataclass(frozen=True)
class AgentDefinition:
    """What a run uses of its agent: the instructions, the tools it may call, and its own
    settings (None: the deployment's default, the worker's TICKWORK_* setting)."""

    instructions: str
    tools: list[str]
    auto_approve: list[str]
    model: str | None = None  # the model alias its turns use
    max_tool_calls: int | None = None  # its hard cap of external tool calls
    token_budget: int | None = None  # tokens one of its runs may spend

    @classmethod
    def from_row(cls, row: dict[str, Any], prefix: str = "") -> AgentDefinition:
        """An agent as a claim (prefix "agent_") or get_agent_for_run returns it."""
        return cls(row[f"{prefix}instructions"], row[f"{prefix}tools"],
                   row[f"{prefix}auto_approve"], row.get(f"{prefix}model"),
                   row.get(f"{prefix}max_tool_calls"), row.get(f"{prefix}token_budget"))


@dataclass(frozen=True)
class Decision:
    """A resumed run's approval: the call's approval id, what a person decided (approved or
    rejected) and why, and the saved state the run paused with (consumed by the claim)."""

    approval_id: str
    status: ApprovalStatus | None  # only "approved" runs the call; anything else refuses it
    reason: str | None
    saved_state: Any


@dataclass(frozen=True)
class ClaimedRun:
    """A run this worker has started (or taken back after an approval) and now owns: the
    execution's fields the run reads, its fence token and the next seq of its journal."""

    id: UUID
    tenant_id: UUID
    agent_id: UUID
    schedule_id: UUID | None
    attempt: int
    timeout_minutes: int
    input: dict[str, Any]
    run_token: UUID
    next_seq: int
    cancel_requested: bool
    agent: AgentDefinition | None  # None: the agent no longer exists
    resume: Decision | None = None  # None: a fresh run
    # How long it waited in the worker for a slot after its claim started it (claimed ahead):
    # its deadline runs from the claim.
    waited_seconds: float = 0.0
    # A run taken back after waiting out a model outage (worker/outage.py): the state it
    # parked with, and the seconds its deadline had left then (None: a full timeout).
    unparked: dict[str, Any] | None = None
    time_left: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any], *, agent: AgentDefinition | None,
                 resume: Decision | None = None,
                 unparked: dict[str, Any] | None = None) -> ClaimedRun:
        """The one place a claim's row (claim_queued_runs, claim_resume or claim_unparked)
        becomes a run."""
        taken_back = resume is not None or unparked is not None
        next_seq = (row["last_seq"] or 0) + 1 if taken_back else RUN_START_SEQ + 1
        return cls(id=row["id"], tenant_id=row["tenant_id"], agent_id=row["agent_id"],
                   schedule_id=row["schedule_id"], attempt=row["attempt"],
                   timeout_minutes=row["timeout_minutes"], input=row["input"],
                   run_token=row["run_token"], next_seq=next_seq,
                   cancel_requested=row["cancel_requested_at"] is not None, agent=agent,
                   resume=resume, unparked=unparked, time_left=row.get("time_left"))


async def lease_tasks(pool: AsyncConnectionPool, *, limit: int,
                      lease_seconds: int) -> list[LeasedTask]:
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["claim_resume_tasks"],
                                    {"limit": limit, "lease_seconds": lease_seconds})
        return [LeasedTask(**row) for row in await cursor.fetchall()]


async def claim_resume(pool: AsyncConnectionPool, *, execution_id: UUID, task_name: str,
                       worker_id: str) -> ClaimedRun | None:
    """Take a suspended run back to running with a fresh deadline; its saved state and the
    decision come back with it, and its agent as it is now. None: a duplicate resume (the
    run is no longer suspended), nothing to run."""
    taken = await _take_back(pool, "claim_resumed_execution", execution_id=execution_id,
                             task_name=task_name, worker_id=worker_id)
    if taken is None:
        return None
    row, agent = taken
    return ClaimedRun.from_row(row, agent=agent, resume=Decision(
        task_name, row["approval_status"], row["approval_reason"], row["state"]))


async def claim_unparked(pool: AsyncConnectionPool, *, execution_id: UUID, task_name: str,
                         worker_id: str) -> ClaimedRun | None:
    """Take a run parked through a model outage back to running, with the deadline it had left
    and its saved state, and its agent as it is now. None: a duplicate delivery (the run is no
    longer parked: taken back already, or cancelled), nothing to run."""
    taken = await _take_back(pool, "claim_unparked_execution", execution_id=execution_id,
                             task_name=task_name, worker_id=worker_id)
    if taken is None:
        return None
    row, agent = taken
    return ClaimedRun.from_row(row, agent=agent,
                               unparked=row["state"] if row["state"] is not None else {})


async def _take_back(pool: AsyncConnectionPool, query: str, *, execution_id: UUID,
                     task_name: str, worker_id: str
                     ) -> tuple[dict[str, Any], AgentDefinition | None] | None:
    """A run back to running under ``query`` (a resume or an unpark), with its agent as it is
    now, settings included (None: the agent is gone); None when the delivery is a duplicate."""
    async with pool.connection() as conn:
        async with conn.transaction():
            cursor = await conn.execute(QUERIES[query], {
                "execution_id": execution_id, "task_name": task_name, "run_token": new_id(),
                "worker_id": worker_id})
            row = await cursor.fetchone()
    if row is None:
        return None
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["get_agent_for_run"], {"agent_id": row["agent_id"]})
        agent = await cursor.fetchone()
    return row, None if agent is None else AgentDefinition.from_row(agent)


async def claim_queued_runs(pool: AsyncConnectionPool, *, limit: int, worker_id: str,
                            claim_id: UUID | None = None, sent_to: list[int] | None = None,
                            tenant_cap: int = 0) -> list[ClaimedRun]:
    """Claim and start up to ``limit`` fresh runs in one statement (the hot path), round-robin
    across tenants, none that would take a tenant past ``tenant_cap`` running runs (0: no cap)
    or an agent past its max_concurrent_runs; each row is a started execution with its agent's
    definition (agent_found is NULL if it is gone), in the order they should start.
    ``claim_id`` (fresh when not given) names the claim in its claim rows, so that its runs
    can be found if its answer is lost (runs_of_lost_claim); ``sent_to`` gets the pid of the
    backend the claim was sent to, which such a question ends first."""
    async with pool.connection() as conn:
        if sent_to is not None:
            sent_to.append(conn.info.backend_pid)
        cursor = await conn.execute(QUERIES["claim_queued_executions"], {
            "limit": limit, "worker_id": worker_id, "claim_id": claim_id or new_id(),
            "tenant_cap": tenant_cap},
            **HOT_PATH)
        rows = await cursor.fetchall()
    await failpoints.hit("claim.after_commit")  # tests: the answer lost on its way back
    return _fresh_runs(rows)


@reconnecting  # asked again while Postgres restarts (the usual reason it is asked)
async def runs_of_lost_claim(pool: AsyncConnectionPool, *, claim_id: UUID, worker_id: str,
                             sent_to: int | None = None) -> list[ClaimedRun]:
    """The runs a claim of this worker started whose answer never came back, still running:
    the claim's own answer, asked again (none: it did not commit). The backend the claim was
    sent to is ended first, if it is still there (a network cut, a server that stayed up):
    otherwise the claim could commit after the question and its runs wait for the sweep."""
    async with pool.connection() as conn:
        if sent_to is not None:
            cursor = await conn.execute(QUERIES["end_backend_of_lost_claim"], {
                "pid": sent_to, "claim_prefix": CLAIM_PREFIX, "wait_ms": END_LOST_CLAIM_MS})
            ended = await cursor.fetchone()
            if ended is not None:  # still there: it had not answered, or answered into the cut
                log.warning("lost_claim_backend_ended", pid=sent_to, ended=ended["ended"])
        cursor = await conn.execute(QUERIES["get_runs_of_lost_claim"],
                                    {"claim_id": claim_id, "worker_id": worker_id})
        return _fresh_runs(await cursor.fetchall())


def _fresh_runs(rows: list[dict[str, Any]]) -> list[ClaimedRun]:
    return [ClaimedRun.from_row(row, agent=None if row["agent_found"] is None
                                else AgentDefinition.from_row(row, "agent_"))
            for row in rows]
