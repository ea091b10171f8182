"""The agent loop: model turn, tool calls, journal, until the run may stop.

A turn with tool calls runs them through the walls and goes round again. A turn with no tool
call is the only place a run can stop; the stop gate sits there. Before every turn the router
applies its precedence: the hard budget stop, then a person's cancel, then continue. No
transaction is open across a model or tool call: the journal appends in its own short
transactions between them.

A reply's tool calls are renamed by the harness (worker/calls.py) before anything keys on
them; the model calls themselves, with their masking, context retry, usage and streaming,
are worker/model_turn.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from tickwork.sql.journal import RunJournal
from tickwork.sql.vocabulary import FinalStatus, Outcome
from tickwork.worker.calls import CallPolicy, NeedsApproval, harness_named, process_call
from tickwork.worker.compaction import ContextLimits
from tickwork.worker.model import Message, ModelProvider, Reply
from tickwork.worker.model_turn import ContextExhausted, ask_judge, call_model, record_reply
from tickwork.worker.state import Pending, RunState
from tickwork.worker.stop_gate import (GateDecision, GateSettings, decide_empty, decide_with_verdict,
                              decide_without_judge, route)
from tickwork.worker.toolbox import ToolBox
from tickwork.worker.walls import (hard_cap_reached, hard_stop_message, token_stop_message,
                                   turn_warning, turns_stop_message)

ROOT_SEQ = 1  # run_start, written with the claim


@dataclass
class RunOutcome:
    status: FinalStatus
    outcome: Outcome
    reason: str | None
    answer: str


@dataclass
class Suspension:
    """The run waits for a person's decision on ``pending.calls[0]``."""

    needs: NeedsApproval


@dataclass
class Loop:
    run_input: dict[str, Any]
    provider: ModelProvider
    toolbox: ToolBox
    journal: RunJournal
    policy: CallPolicy
    gate: GateSettings
    max_turns: int
    cancel_requested: Callable[[], Awaitable[bool]]
    token_budget: int = 0  # tokens (in + out) a run may spend; 0: no budget
    keep_turns: int = 3  # turns whose tool results are sent whole
    context: ContextLimits = field(default_factory=ContextLimits)  # when to compact
    model: str = "default"  # the model alias the run's turns use (the agent's own, if it has one)
    # Who set token_budget, named when it stops the run.
    token_budget_setting: str = "the deployment's TICKWORK_TOKEN_BUDGET"
    monotonic: Callable[[], float] = time.monotonic
    call_prefix: str = "call"  # how this attempt names its calls (worker/continuation.py)


async def run_agent(state: RunState, loop: Loop) -> RunOutcome | Suspension:
    if state.gate_step is not None:  # parked while its judge was down: judge that answer first
        answer = last_answer(state)
        decision = await stop_gate(state, loop, state.gate_step, Reply(answer))
        if decision.stop:
            return RunOutcome("completed", decision.outcome, decision.reason, answer)
    while True:
        ended = await router(state, loop)
        if ended is not None:
            return ended
        step = begin_step(state, loop.journal)
        try:
            reply = await call_model(state, loop, step)
        except ContextExhausted as exc:
            return RunOutcome("failed", "failed", str(exc), last_answer(state))
        state.model_turns += 1
        calls = harness_named(reply.tool_calls, step, loop.call_prefix)  # before anything keys on an id
        record_reply(loop.journal, reply, step)
        state.messages.append(Message("assistant", reply.text, calls))
        if not calls:
            decision = await stop_gate(state, loop, step, reply)
            if decision.stop:
                return RunOutcome("completed", decision.outcome, decision.reason, reply.text)
            continue
        state.pending = Pending(step, list(calls))  # its own list: calls are popped as they run
        paused = await run_pending(state, loop)
        if paused is not None:
            return paused
        await loop.journal.flush()


async def run_pending(state: RunState, loop: Loop) -> Suspension | None:
    """Run the turn's remaining tool calls in order; stop at one that needs a person."""
    while state.pending is not None and state.pending.calls:
        call = state.pending.calls[0]
        result = await process_call(call, state, loop.toolbox, loop.journal, loop.policy,
                                    state.pending.step)
        if isinstance(result, NeedsApproval):
            return Suspension(result)
        state.messages.append(result)
        state.pending.calls.pop(0)
    state.pending = None
    return None


async def router(state: RunState, loop: Loop) -> RunOutcome | None:
    """Hard budget stop first, then a person's cancel, then continue."""
    over_turns = state.model_turns >= loop.max_turns
    over_tokens = 0 < loop.token_budget <= state.tokens_used
    over_cap = hard_cap_reached(state.meter, loop.policy.walls)
    decision = route(hard_stop=over_cap or over_turns or over_tokens,
                     cancel_requested=await loop.cancel_requested())
    if decision == "continue":
        return None
    if decision == "cancelled":
        reason = "a person cancelled the run"
        loop.journal.emit("gate_decision", {"verdict": "cancelled", "reason": reason,
                                            "units_left": state.units_left}, parent=ROOT_SEQ)
        return RunOutcome("cancelled", "cancelled", reason, last_answer(state))
    return hard_stop(state, loop, "cap" if over_cap else "tokens" if over_tokens else "turns")


def hard_stop(state: RunState, loop: Loop, cause: str) -> RunOutcome:
    """Speak, then end through the normal no-tool-call route: a terminal assistant message
    written for the user. ``cause``: cap (external calls), tokens (the budget) or turns."""
    gathered = gathered_summary(state)
    walls = loop.policy.walls
    if cause == "tokens":
        text = token_stop_message(state.tokens_used, loop.token_budget, gathered,
                                  loop.token_budget_setting)
        reason = (f"token budget of {loop.token_budget} tokens reached "
                  f"({state.tokens_used} used in {state.model_calls} model calls; set by "
                  f"{loop.token_budget_setting})")
    elif cause == "turns":
        text = turns_stop_message(state.model_turns, gathered)
        reason = (f"stopped after {state.model_turns} model turns (set by the deployment's "
                  "TICKWORK_MAX_MODEL_TURNS)")
    else:
        text = hard_stop_message(state.meter, walls, gathered)
        reason = (f"hard cap of {walls.hard_cap} external tool calls reached (set by "
                  f"{walls.hard_cap_setting})")
    state.messages.append(Message("assistant", text, injected=True))
    loop.journal.emit("content_delta", {"text": text, "injected": True}, parent=ROOT_SEQ)
    loop.journal.emit("gate_decision", {"verdict": "hard_stop", "reason": reason,
                                        "units_left": state.units_left}, parent=ROOT_SEQ)
    return RunOutcome("completed", "hard_stop", reason, text)


def begin_step(state: RunState, journal: RunJournal) -> int:
    warning = turn_warning(state.model_turns)
    payload: dict[str, Any] = {"turn": state.model_turns + 1}
    if warning:  # a signal that gates nothing
        state.messages.append(Message("user", warning, injected=True))
        payload["turn_warning"] = warning
    return journal.emit("step_start", payload, parent=ROOT_SEQ)


async def stop_gate(state: RunState, loop: Loop, step: int, reply: Reply) -> GateDecision:
    if not reply.text.strip():
        decision = decide_empty(state.units_left)  # nothing to judge: never done
    else:
        decision = decide_without_judge(state.plan, state.units_left)
    if decision is None:
        state.gate_step = step  # saved if a model outage parks the run during the judge's call
        verdict, reason = await ask_judge(state, loop, step)
        state.gate_step = None
        decision = decide_with_verdict(verdict, reason, state.units_left)
    if decision.spends_unit:
        state.units_left -= 1
    if decision.inject:
        state.messages.append(Message("user", decision.inject, injected=True))
    loop.journal.emit("gate_decision", {"verdict": decision.verdict, "reason": decision.reason,
                                        "injected": decision.inject,
                                        "units_left": state.units_left}, parent=step)
    return decision


def gathered_summary(state: RunState) -> str:
    tools = [m for m in state.messages if m.role == "tool"]
    return f"{len(tools)} tool results; the last answer was: {last_answer(state)[:300] or 'none'}"


def last_answer(state: RunState) -> str:
    for message in reversed(state.messages):
        if message.role == "assistant" and message.content and not message.injected:
            return message.content
    return ""
