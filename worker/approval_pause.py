"""A run paused for a person's approval: the pause saved, the decision applied when the run is
taken back, and the state a resumed run keeps if it is released before it ends."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from tickwork.sql.journal import RunJournal
from tickwork.worker.agent_loop import Loop, Suspension
from tickwork.worker.calls import approval_payload, execute, rejected
from tickwork.worker.claim import ClaimedRun, Decision
from tickwork.worker.redact import for_journal, redact
from tickwork.worker.run_queries import stored_result
from tickwork.worker.state import STATE_VERSION, CorruptState, RunState


async def apply_decision(decision: Decision, state: RunState, loop: Loop) -> None:
    """Run the approved call (exactly once) or tell the model a person said no."""
    if state.pending is None or not state.pending.calls:
        raise CorruptState("saved run state has no call waiting for a decision")
    call, step = state.pending.calls[0], state.pending.step
    spec = loop.toolbox.spec(call.name)
    if decision.status == "approved" and spec is not None:
        message = await execute(call, spec, loop.toolbox, loop.journal, loop.policy, step,
                                approval_id=decision.approval_id)
    else:
        message = rejected(loop.journal, call, decision.reason, step)
    state.messages.append(message)
    state.pending.calls.pop(0)


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
