"""A run paused for a person's approval: the pause saved, the decision applied when the run is
taken back, and the state a resumed run keeps if it is released before it ends."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import failpoints
from tickwork.sql.journal import RunJournal
from tickwork.worker.agent_loop import Loop, Suspension
from tickwork.worker.calls import approval_payload, execute, refused, rejected
from tickwork.worker.cancel_fence import approved_call_fence
from tickwork.worker.claim import ClaimedRun, Decision
from tickwork.worker.redact import for_journal, redact
from tickwork.worker.run_queries import stored_result
from tickwork.worker.toolbox import refusal
from tickwork.worker.state import STATE_VERSION, CorruptState, RunState


async def apply_decision(decision: Decision, state: RunState, loop: Loop) -> None:
    """Run the approved call (exactly once) or tell the model a person said no. A run
    cancelled before the approved call starts never makes it (worker/cancel_fence.py)."""
    if state.pending is None or not state.pending.calls:
        raise CorruptState("saved run state has no call waiting for a decision")
    call, step = state.pending.calls[0], state.pending.step
    spec = loop.toolbox.spec(call.name)
    if decision.status != "approved" or spec is None:
        state.messages.append(rejected(loop.journal, call, decision.reason, step))
        state.pending.calls.pop(0)
        return
    await failpoints.hit("resume.before_approved_call")  # tests: a cancel lands just now
    async with approved_call_fence(loop.toolbox.pool, loop.journal.execution_id) as cancelled:
        if not cancelled:
            state.messages.append(await execute(call, spec, loop.toolbox, loop.journal,
                                                loop.policy, step,
                                                approval_id=decision.approval_id))
            state.pending.calls.pop(0)
            return
    # Cancelled: neither this call nor the turn's others run; the loop's next turn boundary
    # ends the run as a person's cancel.
    loop.journal.cancel_requested = True
    for waiting in state.pending.calls:
        state.messages.append(refused(loop.journal, waiting, "run_cancelled", refusal(
            waiting.name, "a person cancelled the run before it ran", "do not try it again"),
            step))
    state.pending.calls.clear()


async def suspend(run: ClaimedRun, state: RunState, journal: RunJournal,
                  paused: Suspension) -> None:
    """Journal the approval request and save the run's state with it, in one suspension."""
    call, spec = paused.needs.call, paused.needs.spec
    approval_id = f"{run.id}:{call.id}"
    journal.emit("approval_required", approval_payload(call, spec, approval_id),
                 parent=state.pending.step)
    await journal.suspend(state=state.to_state(), version=STATE_VERSION, approval_id=approval_id,
                          tool_call_id=call.id, tool=spec.key,
                          arguments=for_journal(call.arguments),  # shown: redacted
                          usage=state.usage())


async def state_at_rest(pool: AsyncConnectionPool, run: ClaimedRun,
                        decision: Decision) -> dict[str, Any]:
    """The consumed state, to be saved again. The decided call's real arguments stay at rest
    only while it may still have to run (approved, no stored result): once it ran or was
    rejected they are redacted, as for any decided call; the resume replays or refuses it."""
    saved = decision.saved_state
    calls = (saved.get("pending") or {}).get("calls") or []
    if not calls or (decision.status == "approved"
                     and await stored_result(pool, run.id, calls[0]["id"]) is None):
        return saved
    decided = {**calls[0], "arguments": redact(calls[0]["arguments"])}
    return {**saved, "pending": {**saved["pending"], "calls": [decided, *calls[1:]]}}
