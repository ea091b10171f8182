"""One delivery of one task: claim, run, journal, and record the verdict, exactly once.

Everything that can end a run ends it in-band: a finished agent, a model or script error, an
agent that vanished, the run's own deadline, a worker shutting down. Only the deadline leads to
a retry, and that retry is minted by the same verdict the stale sweep gives.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from psycopg_pool import AsyncConnectionPool

from sql import QUERIES
from sql.journal import RunFenced, RunJournal
from sql.lifecycle import fail_timed_out
from worker.agent_loop import ROOT_SEQ, RunOutcome, run_agent
from worker.claim import LeasedTask, claim_execution
from worker.model import ModelProvider
from worker.redact import redact
from worker.settings import WorkerSettings
from worker.state import RunState
from worker.toolbox import ToolBox
from worker.tools.registry import ToolSpec

log = structlog.get_logger()
# The local timer fires a little after the database deadline, so the verdict query (which
# compares with the database clock) always agrees that the deadline has passed.
DEADLINE_MARGIN_SECONDS = 0.5


@dataclass
class RunDeps:
    pool: AsyncConnectionPool
    provider: ModelProvider
    catalog: dict[str, ToolSpec]
    settings: WorkerSettings
    worker_id: str


async def handle_task(task: LeasedTask, deps: RunDeps) -> dict[str, Any]:
    claim = await claim_execution(deps.pool, execution_id=task.execution_id,
                                  task_name=task.name, worker_id=deps.worker_id)
    if claim.skipped is not None:
        log.info("delivery_skipped", execution_id=str(task.execution_id), **claim.skipped)
        return claim.skipped
    execution = claim.execution
    journal = RunJournal(deps.pool, execution["id"], claim.run_token, next_seq=ROOT_SEQ + 1,
                         redact=redact)
    bound = log.bind(execution_id=str(execution["id"]), agent_id=str(execution["agent_id"]),
                     schedule_id=str(execution["schedule_id"]))
    bound.info("run_started", attempt=execution["attempt"])
    try:
        return await _run(execution, journal, deps, bound)
    except RunFenced:
        bound.warning("run_fenced")  # the sweep judged it first; its verdict stands
        return {"fenced": True}


async def _run(execution: dict[str, Any], journal: RunJournal, deps: RunDeps, bound) -> dict:
    agent = await _load_agent(deps.pool, execution["agent_id"])
    if agent is None:
        await _remove_schedules(deps.pool, execution["agent_id"])
        reason = f"agent {execution['agent_id']} no longer exists; its schedules were removed"
        return await _finish(journal, RunOutcome("failed", "failed", reason, ""), bound)
    seconds = execution["timeout_minutes"] * 60 + DEADLINE_MARGIN_SECONDS
    try:
        outcome = await asyncio.wait_for(_agent(execution, agent, journal, deps), seconds)
    except asyncio.TimeoutError:
        return await _timed_out(execution["id"], journal, deps.pool, bound)
    except asyncio.CancelledError:
        await _finish(journal, RunOutcome("cancelled", "cancelled",
                                          "the worker shut down before the run finished", ""),
                      bound)
        raise
    except RunFenced:
        raise
    except Exception as exc:  # journaled and recorded in-band; never retried by transport
        reason = redact(f"{type(exc).__name__}: {exc}")
        outcome = RunOutcome("failed", "failed", reason, "")
    return await _finish(journal, outcome, bound)


async def _agent(execution: dict[str, Any], agent: dict[str, Any], journal: RunJournal,
                 deps: RunDeps) -> RunOutcome:
    state = RunState.start(agent["instructions"], execution["input"])
    toolbox = ToolBox(deps.catalog, agent["tools"], pool=deps.pool, execution_id=execution["id"],
                      plan=state.plan, offload_threshold=deps.settings.offload_threshold_chars,
                      preview_chars=deps.settings.offload_preview_chars, redact=redact)
    return await run_agent(state, run_input=execution["input"], provider=deps.provider,
                           toolbox=toolbox, journal=journal,
                           max_turns=deps.settings.max_model_turns)


async def _finish(journal: RunJournal, outcome: RunOutcome, bound) -> dict[str, Any]:
    journal.emit("run_complete", {"status": outcome.status, "outcome": outcome.outcome,
                                  "reason": outcome.reason, "answer": outcome.answer},
                 parent=ROOT_SEQ)
    await journal.finish(status=outcome.status, outcome=outcome.outcome, reason=outcome.reason)
    bound.info("run_finished", status=outcome.status, outcome=outcome.outcome)
    return {"status": outcome.status, "outcome": outcome.outcome}


async def _timed_out(execution_id: UUID, journal: RunJournal, pool: AsyncConnectionPool,
                     bound) -> dict[str, Any]:
    """Past the deadline: keep what was journaled, then give the sweep's own verdict now."""
    await journal.flush()
    async with pool.connection() as conn:
        async with conn.transaction():
            cursor = await conn.execute(QUERIES["lock_execution_if_timed_out"],
                                        {"execution_id": execution_id})
            failed, retried = await fail_timed_out(conn, await cursor.fetchall(), None)
    bound.warning("run_timed_out", failed=failed, retried=retried)
    return {"status": "failed", "outcome": "timed_out"}


async def _load_agent(pool: AsyncConnectionPool, agent_id: UUID) -> dict[str, Any] | None:
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["get_agent_for_run"], {"agent_id": agent_id})
        return await cursor.fetchone()


async def _remove_schedules(pool: AsyncConnectionPool, agent_id: UUID) -> None:
    async with pool.connection() as conn:
        await conn.execute(QUERIES["delete_agent_schedules"], {"agent_id": agent_id})
