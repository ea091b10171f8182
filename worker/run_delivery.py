"""One delivery of one run: run it (fresh, or taken back after an approval), journal it, and
record its verdict, once.

Everything that can end a run ends it in-band: a finished agent, a model or script error, an
agent that vanished, unreadable saved state, a cancel, the run's own deadline. Only the
deadline leads to a retry, minted by the same verdict the sweep gives. A pause for approval
ends the execution as suspended, with its state saved (worker/approval_pause.py); a model that
stays down parks it, its state saved, until an unpark task takes it back (worker/outage.py). A
worker shutting down never ends a run as cancelled: a run still going after the grace period is
released (journaled, then retried at once as a new attempt for any worker; a run resumed
after an approval goes back to its pause with the decision kept and its resume queued again).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import structlog

from tickwork.sql.journal import RunFenced, RunJournal
from tickwork.worker import tracing
from tickwork.worker.agent_loop import ROOT_SEQ, RunOutcome, Suspension, run_agent, run_pending
from tickwork.worker.approval_pause import apply_decision, state_at_rest, suspend
from tickwork.worker.chat_history import chat_history, is_chat_run
from tickwork.worker.claim import ClaimedRun, LeasedTask, claim_resume, claim_unparked
from tickwork.worker.continuation import Chain, load_chain, rebuild_state
from tickwork.worker.model import ModelUnavailable
from tickwork.worker.outage import Parked, wait_out
from tickwork.worker.redact import journal_json, redact
from tickwork.worker.run_queries import fail_if_timed_out, remove_agent_schedules
from tickwork.worker.run_log import RunLog
from tickwork.worker.run_wiring import RunDeps, agent_walls, build_loop
from tickwork.worker.secrets import RunSecrets
from tickwork.worker.state import RunState
from tickwork.worker.tools.python_sandbox import PythonSandbox

log = structlog.get_logger()
# The local timer fires a little after the database deadline, so the verdict query (which
# compares with the database clock) always agrees that the deadline has passed.
DEADLINE_MARGIN_SECONDS = 0.5


def _no_slot() -> None:
    return None


async def run_claimed(run: ClaimedRun, deps: RunDeps,
                      free_slot: Callable[[], None] = _no_slot) -> dict[str, Any]:
    """A run already claimed and started by claim_queued_runs (the hot path). free_slot is
    called once the agent's work is over and only its verdict is left to write."""
    return await _run(run, deps, free_slot)


async def handle_task(task: LeasedTask, deps: RunDeps,
                      free_slot: Callable[[], None] = _no_slot) -> dict[str, Any]:
    """A leased task (resume or unpark, the only kinds leased): the suspended or parked run
    back to running, once."""
    claim = claim_unparked if task.kind == "unpark" else claim_resume
    run = await claim(deps.pool, execution_id=task.execution_id, task_name=task.name,
                      worker_id=deps.worker_id)
    if run is None:
        skipped = {"skipped": "duplicate resume"}
        log.info("delivery_skipped", execution_id=str(task.execution_id), **skipped)
        return skipped
    return await _run(run, deps, free_slot)


async def _run(run: ClaimedRun, deps: RunDeps, free_slot: Callable[[], None]) -> dict[str, Any]:
    secrets = RunSecrets(deps.pool, run.tenant_id, deps.secret_box)
    sandbox = PythonSandbox(deps.sandbox_limits)  # started by the run's first run_python call
    journal = _journal(run, deps, secrets)
    journal.cancel_requested = run.cancel_requested
    run_log = RunLog(run)
    approval_id = run.resume.approval_id if run.resume is not None else None
    # One info line per run (run_finished, or how else it ended): each rendered line costs
    # about as much as a journal append's encoding. The start is there at debug level.
    if approval_id:
        run_log.info("run_resumed")
    elif run.unparked is not None:
        run_log.info("run_unparked")  # back from waiting out its model's outage
    else:
        run_log.debug("run_started")
    # Every delivery is a root span of the trace keyed by the execution id (worker/tracing.py).
    with tracing.run(run.id, worker_id=deps.worker_id, resumed=approval_id,
                     agent_id=run.agent_id, schedule_id=run.schedule_id,
                     tenant_id=run.tenant_id, attempt=run.attempt) as span:
        try:
            result = await _guarded(run, journal, deps, run_log, free_slot, secrets, sandbox)
        except RunFenced:
            run_log.warning("run_fenced")  # the sweep judged it first; its verdict stands
            result = {"fenced": True}
        finally:  # however the delivery ends (done, paused, cancelled, released, timed out)
            await sandbox.close()
        tracing.end_run(span, result)
        return result


def _journal(run: ClaimedRun, deps: RunDeps, secrets: RunSecrets | None = None) -> RunJournal:
    if secrets is None:
        return RunJournal(deps.pool, run.id, run.run_token, next_seq=run.next_seq,
                          payload_json=journal_json, writer=deps.journal_writer)
    return RunJournal(deps.pool, run.id, run.run_token, next_seq=run.next_seq,
                      payload_json=secrets.journal_json, writer=deps.journal_writer,
                      shown=secrets.scrub)


async def _guarded(run: ClaimedRun, journal: RunJournal, deps: RunDeps, run_log,
                   free_slot: Callable[[], None], secrets: RunSecrets,
                   sandbox: PythonSandbox | None = None) -> dict[str, Any]:
    allowed = run.timeout_minutes * 60 if run.time_left is None else run.time_left  # unparked
    seconds = allowed + DEADLINE_MARGIN_SECONDS - run.waited_seconds
    held: dict[str, RunState] = {}  # the run's state once built, for its usage at the end
    try:
        async with asyncio.timeout(seconds):  # in this task: no task of its own per run
            result = await _drive(run, journal, deps, held, secrets, sandbox)
    except TimeoutError:
        return await _timed_out(run, journal, deps, run_log)
    except asyncio.CancelledError:  # the worker's grace period is over
        await _release(run, journal, deps, run_log)
        raise
    except RunFenced:
        raise
    except Exception as exc:  # journaled and recorded in-band; never retried by transport
        result = RunOutcome("failed", "failed", redact(f"{type(exc).__name__}: {exc}"), "")
    if isinstance(result, Suspension):
        run_log.info("run_suspended", tool=result.needs.spec.key)
        return {"status": "completed", "breadcrumb": "suspended"}
    if isinstance(result, Parked):  # waits out its model's outage with no worker
        run_log.info("run_parked", wait=result.attempt, wait_seconds=result.wait_seconds)
        return {"status": "running", "breadcrumb": "parked"}
    usage = held["state"].usage() if "state" in held else None
    free_slot()  # the agent is done: another run may start while this verdict is written
    return await _finish(journal, result, run_log, usage)


async def _drive(run: ClaimedRun, journal: RunJournal, deps: RunDeps,
                 held: dict[str, RunState], secrets: RunSecrets,
                 sandbox: PythonSandbox | None = None) -> RunOutcome | Suspension | Parked:
    if run.agent is None:
        await remove_agent_schedules(deps.pool, run.agent_id)
        return RunOutcome("failed", "failed", f"agent {run.agent_id} no longer exists; "
                          "its schedules were removed", "")
    chain = await load_chain(deps.pool, run.id, run.attempt)
    if run.resume is not None:  # CorruptState fails the run in-band
        state = RunState.from_state(run.resume.saved_state)
    elif run.unparked is not None:  # back from a model outage: it asks its model again
        state = RunState.from_state(run.unparked)
    else:
        state = await _fresh_state(run, deps, chain)
    held["state"] = state
    loop = build_loop(run, run.agent, state, journal, deps, chain, secrets, sandbox)
    try:
        paused = await _go_on(run, state, loop, journal, chain)
    except ModelUnavailable as outage:  # parked without a worker, or failed once patience ends
        return await wait_out(state, journal, outage, deps.settings.provider_patience_seconds)
    if isinstance(paused, Suspension):
        await suspend(run, state, journal, paused)
    return paused


async def _fresh_state(run: ClaimedRun, deps: RunDeps, chain: Chain) -> RunState:
    """A run's first state: its task, or, for a retry, where the attempts before it stopped
    (worker/continuation.py)."""
    # A chat's run starts from the chat's earlier exchange (the chain's first attempt is the
    # one its message names).
    earlier = await chat_history(deps.pool, chain.root) if is_chat_run(run.input) else []
    state = RunState.start(run.agent.instructions, run.input,
                           units=deps.settings.continuation_units, earlier=earlier)
    if not chain.earlier:
        return state
    toolset = deps.toolset(run.agent.tools)
    return await rebuild_state(deps.pool, chain, state, walls=agent_walls(run.agent, deps),
                               spec_of=lambda name: toolset.specs.get(name))


async def _go_on(run: ClaimedRun, state: RunState, loop, journal: RunJournal,
                 chain: Chain) -> RunOutcome | Suspension:
    """Run the agent from where its state stands: a decided call first (a resume), or the
    last turn's calls a retry does not know the results of, then model turns."""
    if run.resume is not None:
        await apply_decision(run.resume, state, loop)
    elif state.pending is not None and chain.earlier and run.unparked is None:
        state.pending.step = journal.emit("step_start", {
            "turn": state.model_turns, "continues": str(chain.earlier[-1]),
            "calls": [call.id for call in state.pending.calls]}, parent=ROOT_SEQ)
    if state.pending is not None:
        paused = await run_pending(state, loop)
        if paused is not None:
            return paused
        await journal.flush()
    return await run_agent(state, loop)


async def _finish(journal: RunJournal, outcome: RunOutcome, run_log,
                  usage: dict[str, int] | None = None) -> dict[str, Any]:
    journal.emit("run_complete", {"status": outcome.status, "outcome": outcome.outcome,
                                  "reason": outcome.reason, "answer": outcome.answer},
                 parent=ROOT_SEQ)
    await journal.finish(status=outcome.status, outcome=outcome.outcome, reason=outcome.reason,
                         usage=usage, answer=redact(outcome.answer) if outcome.answer else None)
    tracing.note_run(**{f"usage.{k}": v for k, v in (usage or {}).items()})
    run_log.info("run_finished", status=outcome.status, outcome=outcome.outcome)
    return {"status": outcome.status, "outcome": outcome.outcome}


async def release_unstarted(run: ClaimedRun, deps: RunDeps) -> None:
    """A run claimed ahead that never got a slot before the worker's grace period ended: it
    did no work, and is handed on like one interrupted (a new attempt any worker can take)."""
    journal = _journal(run, deps)
    run_log = RunLog(run)
    try:
        await _release(run, journal, deps, run_log)
    except RunFenced:
        run_log.warning("run_fenced")  # the sweep judged it first; its verdict stands


async def _release(run: ClaimedRun, journal: RunJournal, deps: RunDeps, run_log) -> None:
    """Hand the unfinished run to another worker at once (sql.lifecycle.release_run). A
    resumed run goes back to its pause with the state its resume started from, so the decided
    call is still pending in it (replayed from the tool-call store if it already ran)."""
    saved_state, approval_id = None, None
    if run.resume is not None:  # not an end: the run goes back to its pause
        approval_id = run.resume.approval_id
        saved_state = await state_at_rest(deps.pool, run, run.resume)
        journal.emit("gate_decision", {
            "verdict": "released", "released": True, "resume": approval_id,
            "reason": "released: the worker shut down before the resumed run finished; the "
                      "decision stands and the run resumes again at once",
            "units_left": (saved_state or {}).get("units_left")}, parent=ROOT_SEQ)
    released = await journal.release(approval_id, saved_state)
    tracing.note_run(released=True)
    run_log.warning("run_released", **{k: str(v) for k, v in released.items()})


async def _timed_out(run: ClaimedRun, journal: RunJournal, deps: RunDeps,
                     run_log) -> dict[str, Any]:
    """Past the deadline: keep what was journaled, then give the sweep's own verdict now."""
    await journal.flush()
    failed, retried = await fail_if_timed_out(deps.pool, run.id)
    run_log.warning("run_timed_out", failed=failed, retried=retried)
    return {"status": "failed", "outcome": "timed_out"}
