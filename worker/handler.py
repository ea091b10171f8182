"""One delivery of one task: claim (or resume), run, journal, and record the verdict, once.

Everything that can end a run ends it in-band: a finished agent, a model or script error, an
agent that vanished, unreadable saved state, a cancel, the run's own deadline. Only the
deadline leads to a retry, minted by the same verdict the sweep gives. A pause for approval
ends the execution as suspended, with its state saved. A worker shutting down never ends a
run as cancelled: a run still going after the grace period is released (journaled, then
retried at once as a new attempt for any worker; a run resumed after an approval goes back to
its pause with the decision kept and its resume queued again).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.finisher import Finisher
from tickwork.sql.journal import RunFenced, RunJournal
from tickwork.sql.lifecycle import fail_timed_out
from tickwork.worker.agent_loop import ROOT_SEQ, Loop, RunOutcome, Suspension, run_agent, run_pending
from tickwork.worker.calls import CallPolicy, approval_payload, execute, rejected
from tickwork.worker.claim import LeasedTask, claim_resume
from tickwork.worker.model import ModelProvider
from tickwork.worker import tracing
from tickwork.worker.redact import for_journal, redact
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.state import STATE_VERSION, CorruptState, RunState
from tickwork.worker.stop_gate import GateSettings
from tickwork.worker.toolbox import ToolBox
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.tools.sandbox import QueryLimits
from tickwork.worker.walls import WallSettings

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
    finisher: Finisher | None = None  # batches the ends of runs; None writes each alone


async def run_claimed(execution: dict[str, Any], deps: RunDeps) -> dict[str, Any]:
    """A run already claimed and started by claim_queued_runs (the hot path)."""
    agent = None
    if execution["agent_found"] is not None:
        agent = {"instructions": execution["agent_instructions"],
                 "tools": execution["agent_tools"], "auto_approve": execution["agent_auto_approve"]}
    return await _run(execution, execution["run_token"], ROOT_SEQ + 1, deps, None, agent)


async def handle_task(task: LeasedTask, deps: RunDeps) -> dict[str, Any]:
    """A leased resume task (the only kind leased): the suspended run back to running, once."""
    claim = await claim_resume(deps.pool, execution_id=task.execution_id, task_name=task.name)
    if claim.skipped is not None:
        log.info("delivery_skipped", execution_id=str(task.execution_id), **claim.skipped)
        return claim.skipped
    execution = claim.execution
    agent = await _load_agent(deps.pool, execution["agent_id"])
    return await _run(execution, claim.run_token, (execution["last_seq"] or 0) + 1, deps,
                      task.name, agent)


async def _run(execution: dict[str, Any], run_token: UUID, next_seq: int, deps: RunDeps,
               approval_id: str | None, agent: dict[str, Any] | None) -> dict[str, Any]:
    journal = RunJournal(deps.pool, execution["id"], run_token, next_seq=next_seq,
                         redact=for_journal)
    journal.cancel_requested = execution["cancel_requested_at"] is not None
    bound = log.bind(execution_id=str(execution["id"]), agent_id=str(execution["agent_id"]),
                     schedule_id=str(execution["schedule_id"]), attempt=execution["attempt"])
    # One info line per run (run_finished, or how else it ended): each rendered line costs
    # about as much as a journal append's encoding. The start is there at debug level.
    if approval_id:
        bound.info("run_resumed")
    else:
        bound.debug("run_started")
    # Every delivery is a root span of the trace keyed by the execution id (worker/tracing.py).
    with tracing.run(execution, worker_id=deps.worker_id, resumed=approval_id) as span:
        try:
            result = await _guarded(execution, agent, journal, deps, bound, approval_id)
        except RunFenced:
            bound.warning("run_fenced")  # the sweep judged it first; its verdict stands
            result = {"fenced": True}
        tracing.end_run(span, result)
        return result


async def _guarded(execution: dict, agent: dict | None, journal: RunJournal, deps: RunDeps,
                   bound, approval_id: str | None) -> dict[str, Any]:
    seconds = execution["timeout_minutes"] * 60 + DEADLINE_MARGIN_SECONDS
    held: dict[str, RunState] = {}  # the run's state once built, for its usage at the end
    try:
        result = await asyncio.wait_for(_drive(execution, agent, journal, deps, approval_id,
                                               held), seconds)
    except asyncio.TimeoutError:
        return await _timed_out(execution["id"], journal, deps.pool, bound)
    except asyncio.CancelledError:  # the worker's grace period is over
        await _release(journal, bound, deps.pool, execution, approval_id)
        raise
    except RunFenced:
        raise
    except Exception as exc:  # journaled and recorded in-band; never retried by transport
        result = RunOutcome("failed", "failed", redact(f"{type(exc).__name__}: {exc}"), "")
    if isinstance(result, Suspension):
        bound.info("run_suspended", tool=result.needs.spec.key)
        return {"status": "completed", "breadcrumb": "suspended"}
    usage = held["state"].usage() if "state" in held else None
    return await _finish(journal, result, bound, deps.finisher, usage)


async def _drive(execution: dict, agent: dict | None, journal: RunJournal, deps: RunDeps,
                 approval_id: str | None, held: dict[str, RunState]) -> RunOutcome | Suspension:
    if agent is None:
        await _remove_schedules(deps.pool, execution["agent_id"])
        return RunOutcome("failed", "failed", f"agent {execution['agent_id']} no longer exists; "
                          "its schedules were removed", "")
    if approval_id is None:
        state = RunState.start(agent["instructions"], execution["input"],
                               units=deps.settings.continuation_units)
    else:
        state = RunState.from_state(execution["state"])  # CorruptState fails the run in-band
    held["state"] = state
    loop = _loop(execution, agent, state, journal, deps)
    if approval_id is not None:
        await _apply_decision(execution, state, loop, approval_id)
        paused = await run_pending(state, loop)
        if paused is None:
            await journal.flush()
            paused = await run_agent(state, loop)
    else:
        paused = await run_agent(state, loop)
    if isinstance(paused, Suspension):
        await _suspend(execution["id"], state, journal, paused)
    return paused


async def _apply_decision(execution: dict, state: RunState, loop: Loop, approval_id: str) -> None:
    """Run the approved call (exactly once) or tell the model a person said no."""
    if state.pending is None or not state.pending.calls:
        raise CorruptState("saved run state has no call waiting for a decision")
    call, step = state.pending.calls[0], state.pending.step
    spec = loop.toolbox.spec(call.name)
    if execution["approval_status"] == "approved" and spec is not None:
        message = await execute(call, spec, loop.toolbox, loop.journal, loop.policy, step,
                                approval_id=approval_id)
    else:
        message = rejected(loop.journal, call, execution["approval_reason"], step)
    state.messages.append(message)
    state.pending.calls.pop(0)


async def _suspend(execution_id: UUID, state: RunState, journal: RunJournal,
                   paused: Suspension) -> None:
    call, spec = paused.needs.call, paused.needs.spec
    approval_id = f"{execution_id}:{call.id}"
    journal.emit("approval_required", approval_payload(call, spec, approval_id),
                 parent=state.pending.step)
    await journal.suspend(state=state.to_state(), version=STATE_VERSION, approval_id=approval_id,
                          tool_call_id=call.id, tool=spec.key,
                          arguments=for_journal(call.arguments),  # shown: redacted
                          usage=state.usage())


def _loop(execution: dict, agent: dict, state: RunState, journal: RunJournal,
          deps: RunDeps) -> Loop:
    s, pool, execution_id = deps.settings, deps.pool, execution["id"]
    toolbox = ToolBox(deps.catalog, agent["tools"], pool=pool, execution_id=execution_id,
                      plan=state.plan, offload_threshold=s.offload_threshold_chars,
                      preview_chars=s.offload_preview_chars, redact=redact,
                      tool_timeout=s.tool_timeout_seconds,
                      query_limits=QueryLimits(time_limit_s=s.query_file_time_limit_seconds,
                                               memory_mb=s.query_file_memory_mb))
    walls = WallSettings(per_tool=s.per_tool_cap, aggregate=s.aggregate_cap,
                         delivery=s.delivery_reserve, query_loop=s.query_loop_cap,
                         hard_cap=s.hard_cap)
    policy = CallPolicy(walls=walls, auto_approve=frozenset(agent["auto_approve"]),
                        stored_result=lambda call_id: _stored(pool, execution_id, call_id),
                        store_result=lambda call_id, text, ok: _store(pool, execution_id,
                                                                      call_id, text, ok))
    return Loop(run_input=execution["input"], provider=deps.provider, toolbox=toolbox,
                journal=journal, policy=policy,
                gate=GateSettings(continuation_units=s.continuation_units,
                                  judge_window=s.judge_window),
                max_turns=s.max_model_turns,
                cancel_requested=lambda: _flag(journal),
                token_budget=s.token_budget, keep_turns=s.context_keep_turns)


async def _finish(journal: RunJournal, outcome: RunOutcome, bound,
                  finisher: Finisher | None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    journal.emit("run_complete", {"status": outcome.status, "outcome": outcome.outcome,
                                  "reason": outcome.reason, "answer": outcome.answer},
                 parent=ROOT_SEQ)
    await journal.finish(status=outcome.status, outcome=outcome.outcome, reason=outcome.reason,
                         finisher=finisher, usage=usage)
    tracing.note_run(**{f"usage.{k}": v for k, v in (usage or {}).items()})
    bound.info("run_finished", status=outcome.status, outcome=outcome.outcome)
    return {"status": outcome.status, "outcome": outcome.outcome}


async def _release(journal: RunJournal, bound, pool: AsyncConnectionPool, execution: dict,
                   approval_id: str | None) -> None:
    """Hand the unfinished run to another worker at once (sql.lifecycle.release_run). A
    resumed run goes back to its pause with the state its resume started from, so the decided
    call is still pending in it (replayed from the tool-call store if it already ran)."""
    saved_state = None
    if approval_id is not None:  # not an end: the run goes back to its pause
        saved_state = await _state_at_rest(pool, execution)
        journal.emit("gate_decision", {
            "verdict": "released", "released": True, "resume": approval_id,
            "reason": "released: the worker shut down before the resumed run finished; the "
                      "decision stands and the run resumes again at once",
            "units_left": (saved_state or {}).get("units_left")}, parent=ROOT_SEQ)
    released = await journal.release(approval_id, saved_state)
    tracing.note_run(released=True)
    bound.warning("run_released", **{k: str(v) for k, v in released.items()})


async def _state_at_rest(pool: AsyncConnectionPool, execution: dict) -> dict[str, Any]:
    """The consumed state, to be saved again. The decided call's real arguments stay at rest
    only while it may still have to run (approved, no stored result): once it ran or was
    rejected they are redacted, as for any decided call; the resume replays or refuses it."""
    saved = execution["state"]
    calls = (saved.get("pending") or {}).get("calls") or []
    if not calls or (execution["approval_status"] == "approved"
                     and await _stored(pool, execution["id"], calls[0]["id"]) is None):
        return saved
    decided = {**calls[0], "arguments": redact(calls[0]["arguments"])}
    return {**saved, "pending": {**saved["pending"], "calls": [decided, *calls[1:]]}}


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


async def _fetch(pool: AsyncConnectionPool, query: str, params: dict) -> dict | None:
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES[query], params)
        return await cursor.fetchone()


async def _load_agent(pool: AsyncConnectionPool, agent_id: UUID) -> dict[str, Any] | None:
    return await _fetch(pool, "get_agent_for_run", {"agent_id": agent_id})


async def _remove_schedules(pool: AsyncConnectionPool, agent_id: UUID) -> None:
    async with pool.connection() as conn:
        await conn.execute(QUERIES["delete_agent_schedules"], {"agent_id": agent_id})


async def _flag(journal: RunJournal) -> bool:
    """A person's stop request, as the journal learned it with its last append (no query of
    its own: the run checks at every turn boundary for free)."""
    return journal.cancel_requested


async def _stored(pool: AsyncConnectionPool, execution_id: UUID, call_id: str):
    row = await _fetch(pool, "get_tool_call_result",
                       {"execution_id": execution_id, "tool_call_id": call_id})
    return (row["result"], row["ok"]) if row else None


async def _store(pool: AsyncConnectionPool, execution_id: UUID, call_id: str, text: str,
                 ok: bool) -> None:
    async with pool.connection() as conn:
        await conn.execute(QUERIES["record_tool_call_result"], {
            "execution_id": execution_id, "tool_call_id": call_id, "result": text, "ok": ok})
