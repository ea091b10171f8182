"""One tool call, start to end: the walls, the approval check, execution and its journal.

Order matters: an unknown tool is refused first; then the walls decide (and the meter counts
the attempt); then a call that needs a person pauses the run; only then does anything run.
A completed call that needed approval is recorded in the tool-call idempotency store, so a
resume delivered twice never runs it twice (a pause itself is never recorded).

Calls are named by the harness (``harness_named``), never by the model: a model may repeat an
id within a reply or across turns, or send one that is long, odd or missing. The harness's
names key approvals, the tool-call store and the journal, and are what the model sees back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Awaitable, Callable

from tickwork.sql import failpoints
from tickwork.sql.journal import RunJournal
from tickwork.worker import tracing
from tickwork.worker.model import Message, ToolCall
from tickwork.worker.toolbox import ToolBox, refusal
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.walls import Refuse, WallSettings, metered
from tickwork.worker.state import RunState

# Only this class runs without a person; send/write/delete and any missing or unknown class wait.
UNASKED_CLASS = "read"
PROVIDER_ID_CHARS = 200  # the model's own id is kept for logs only, and kept short


@dataclass
class NeedsApproval:
    call: ToolCall
    spec: ToolSpec


@dataclass
class CallPolicy:
    walls: WallSettings
    auto_approve: frozenset[str]
    stored_result: Callable[[str], Awaitable[tuple[str, bool] | None]]
    store_result: Callable[[str, str, bool], Awaitable[None]]


def harness_named(calls: list[ToolCall], step: int, prefix: str = "call") -> list[ToolCall]:
    """The reply's calls renamed {prefix}_{step}_{index}: the step's seq is unique within the
    run (across turns and resumes), and a retry's prefix carries its attempt
    (worker/continuation.py), so every name is unique in the run chain too, short and URL-safe.
    The model's own id stays in provider_id, for logs and the journal only."""
    return [ToolCall(f"{prefix}_{step}_{index}", call.name, call.arguments,
                     provider_id=(str(call.id)[:PROVIDER_ID_CHARS] if call.id else None))
            for index, call in enumerate(calls)]


def needs_approval(spec: ToolSpec, arguments: dict, policy: CallPolicy) -> bool:
    """Deny by default: only external tools of class read run unasked; send, write, delete and a
    missing or unknown class wait for a person, unless the tool declares its own rule (a flag
    or a predicate over the arguments) or the operator put it on the agent's auto_approve list
    (their explicit choice, which wins). Local tools never wait."""
    if spec.is_local or spec.key in policy.auto_approve:
        return False
    if spec.approval is not None:
        return spec.approval(arguments) if callable(spec.approval) else bool(spec.approval)
    return spec.tool_class != UNASKED_CLASS


async def process_call(call: ToolCall, state: RunState, toolbox: ToolBox, journal: RunJournal,
                       policy: CallPolicy, step: int) -> Message | NeedsApproval:
    admitted = await admit(call, state, toolbox, journal, policy, step)
    if not isinstance(admitted, ToolSpec):
        return admitted
    return await execute(call, admitted, toolbox, journal, policy, step,
                         auto_approved=admitted.key in policy.auto_approve)


async def admit(call: ToolCall, state: RunState, toolbox: ToolBox, journal: RunJournal,
                policy: CallPolicy, step: int) -> ToolSpec | Message | NeedsApproval:
    """Everything before a call runs: the tool it names (or a refusal), the walls, and whether
    a person must decide. Returns the spec to execute with, a refusal, or NeedsApproval."""
    spec = toolbox.spec(call.name)
    if spec is None:
        state.meter.external_attempts += 1  # a loop on a made-up tool still reaches the hard cap
        text = refusal(call.name, "this agent has no such tool",
                       f"use one of: {', '.join(s.name for s in toolbox.schemas()) or 'no tools'}")
        return refused(journal, call, "unknown_tool", text, step)
    decision = await metered(call, spec, state.meter, policy.walls)
    if isinstance(decision, Refuse):
        return refused(journal, call, decision.wall, decision.message, step)
    if needs_approval(spec, call.arguments, policy):
        tracing.tool_not_run(spec.key, call.id, step, awaiting_approval=True)
        return NeedsApproval(call, spec)
    return spec


def refused(journal: RunJournal, call: ToolCall, wall: str, text: str, step: int) -> Message:
    tracing.tool_not_run(call.name, call.id, step, wall=wall)
    journal.emit("budget_refusal", {"tool": call.name, "wall": wall, "message": text,
                                    "call_id": call.id, **_provider(call)}, parent=step)
    return Message("tool", text, tool_call_id=call.id)


async def execute(call: ToolCall, spec: ToolSpec, toolbox: ToolBox, journal: RunJournal,
                  policy: CallPolicy, step: int, *, approval_id: str | None = None,
                  auto_approved: bool = False) -> Message:
    started = journal.emit("tool_start", {
        "tool": spec.key, "call_id": call.id, "arguments": call.arguments, **_provider(call),
        **({"approval_id": approval_id} if approval_id else {}),
        **({"auto_approved": True} if auto_approved else {})}, parent=step)
    # Calls with effects (every class but read) are recorded once done, keyed by the harness's
    # name for the call, so a resume delivered twice replays the record instead of the effect.
    recorded = not spec.is_local and spec.tool_class != UNASKED_CLASS
    with tracing.tool_call(spec.key, call.id, step, tool_class=spec.tool_class,
                           approval_id=approval_id, auto_approved=auto_approved or None) as span:
        stored = await policy.stored_result(call.id) if recorded else None
        duration_ms = 0.0
        if stored is not None:
            text, ok = stored  # it already ran (a resume delivered twice): never run it again
        else:
            # parent: run_python's calls from code hang under this call's tool_start
            outcome = await toolbox.call(call, spec, step=step, parent=started)
            text, ok, duration_ms = outcome.text, outcome.ok, outcome.duration_ms
            await failpoints.hit("run.after_tool_effect_before_tool_complete")
            if recorded:
                await policy.store_result(call.id, text, ok)
        tracing.note_tool(span, ok=ok, replayed=stored is not None)
    journal.emit("tool_complete", {"tool": spec.key, "call_id": call.id, "ok": ok,
                                   "result_chars": len(text), "duration_ms": duration_ms,
                                   "replayed": stored is not None}, parent=started)
    return Message("tool", text, tool_call_id=call.id)


def rejected(journal: RunJournal, call: ToolCall, reason: str | None, step: int) -> Message:
    why = "a person rejected it" + (f" ({reason})" if reason else "")
    text = refusal(call.name, why, "do not try this call again; continue the task without it "
                                   "and say in your answer that it was not done")
    return refused(journal, call, "approval_rejected", text, step)


def approval_payload(call: ToolCall, spec: ToolSpec, approval_id: str) -> dict:
    return {"approval_id": approval_id, "tool": spec.key, "call_id": call.id, **_provider(call),
            "arguments": json.loads(json.dumps(call.arguments, default=str)),
            "tool_class": spec.tool_class}


def _provider(call: ToolCall) -> dict[str, str]:
    return {"provider_id": call.provider_id} if call.provider_id else {}
