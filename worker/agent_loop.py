"""The agent loop: model turn, tool calls, journal, until the run may stop.

A turn with tool calls runs them through the walls and goes round again. A turn with no tool
call is the only place a run can stop; the stop gate sits there. Before every turn the router
applies its precedence: the hard budget stop, then a person's cancel, then continue. No
transaction is open across a model or tool call: the journal appends in its own short
transactions between them.

Around each model call: the reply's tool calls are renamed by the harness before anything
else sees them; what is sent masks old tool results (worker/context.py), and a provider that
says the context is too long gets that one call again, once, with everything older than the
current turn masked; every call's usage is added to the run and journaled (model_usage); a
streaming provider's text is journaled as it arrives (worker/streaming.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from sql.journal import RunJournal
from worker.calls import CallPolicy, NeedsApproval, harness_named, process_call
from worker.context import masked_count, masked_for_model
from worker.model import ContextTooLong, Message, ModelProvider, Reply
from worker.state import Pending, RunState
from worker.stop_gate import (UNREADABLE, GateDecision, GateSettings, decide_empty,
                              decide_with_verdict, decide_without_judge, judge_messages,
                              parse_verdict, route)
from worker.streaming import TextStream
from worker.toolbox import ToolBox
from worker.walls import hard_cap_reached, hard_stop_message, token_stop_message, turn_warning

ROOT_SEQ = 1  # run_start, written with the claim


@dataclass
class RunOutcome:
    status: str  # completed | failed | cancelled
    outcome: str  # done | question | stalled_out | hard_stop | failed | cancelled
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
    monotonic: Callable[[], float] = time.monotonic


async def run_agent(state: RunState, loop: Loop) -> RunOutcome | Suspension:
    while True:
        ended = await router(state, loop)
        if ended is not None:
            return ended
        step = begin_step(state, loop.journal)
        reply = await call_model(state, loop, step)
        if isinstance(reply, RunOutcome):
            return reply
        state.model_turns += 1
        calls = harness_named(reply.tool_calls, step)  # before anything keys on an id
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


async def call_model(state: RunState, loop: Loop, step: int) -> Reply | RunOutcome:
    """One model turn: the messages with old results masked, text journaled as it streams.
    A context-too-long answer is retried once with everything older than the current turn
    masked (journaled as context_masked); a second one fails the run, never a loop."""
    sent = masked_for_model(state.messages, 1 if state.context_tight else loop.keep_turns)
    try:
        return await _complete(state, loop, step, sent)
    except ContextTooLong as exc:
        tight = masked_for_model(state.messages, 1)
        said = str(exc)[:300]
        if state.context_tight or [m.content for m in tight] == [m.content for m in sent]:
            return _too_long(state, f"nothing more could be masked (the provider said: {said})")
        state.context_tight = True  # from now on, so every later call does not fail first
        loop.journal.emit("context_masked", {
            "reason": "context_too_long", "error": said, "keep_turns": 1,
            "masked_results": masked_count(tight, state.messages), "retry": 1}, parent=step)
    try:
        return await _complete(state, loop, step, tight)
    except ContextTooLong as exc:
        return _too_long(state, f"even with every tool result older than the current turn "
                                f"masked (the provider said: {str(exc)[:300]})")


async def _complete(state: RunState, loop: Loop, step: int, sent: list[Message]) -> Reply:
    stream = TextStream(lambda payload: loop.journal.emit("content_delta", payload, parent=step),
                        monotonic=loop.monotonic)
    try:
        reply = await loop.provider.complete("default", sent, loop.toolbox.schemas(),
                                             state.view(loop.run_input), on_text=stream)
    except BaseException:
        stream.discard()
        raise
    if reply.streamed:
        stream.close()  # the remainder; the whole text is not journaled again
    else:
        stream.discard()
    count_usage(state, loop.journal, "default", reply, step)
    return reply


def _too_long(state: RunState, why: str) -> RunOutcome:
    return RunOutcome("failed", "failed", f"The conversation no longer fits the model's context "
                      f"{why}.", last_answer(state))


def count_usage(state: RunState, journal: RunJournal, alias: str, reply: Reply,
                step: int) -> None:
    """Add a model call's cost to the run; journal the per-call figures when reported."""
    state.add_usage(reply.usage)
    if reply.usage is not None:
        journal.emit("model_usage", {"alias": alias, "input_tokens": reply.usage.input_tokens,
                                     "output_tokens": reply.usage.output_tokens}, parent=step)


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
    if cause == "tokens":
        text = token_stop_message(state.tokens_used, loop.token_budget, gathered)
        reason = (f"token budget of {loop.token_budget} tokens reached "
                  f"({state.tokens_used} used in {state.model_calls} model calls)")
    else:
        text = hard_stop_message(state.meter, loop.policy.walls, gathered)
        reason = (f"stopped after {state.model_turns} model turns" if cause == "turns" else
                  f"hard cap of {loop.policy.walls.hard_cap} external tool calls reached")
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
        verdict, reason = await ask_judge(state, loop, step)
        decision = decide_with_verdict(verdict, reason, state.units_left)
    if decision.spends_unit:
        state.units_left -= 1
    if decision.inject:
        state.messages.append(Message("user", decision.inject, injected=True))
    loop.journal.emit("gate_decision", {"verdict": decision.verdict, "reason": decision.reason,
                                        "injected": decision.inject,
                                        "units_left": state.units_left}, parent=step)
    return decision


async def ask_judge(state: RunState, loop: Loop, step: int) -> tuple[str, str]:
    """The judge's (verdict, reason) on the last messages. A judge whose model says the prompt
    is too long is asked once more with every message cut shorter (journaled as
    context_masked); a second refusal reads as an unreadable verdict, so stalled."""
    window = state.messages[-loop.gate.judge_window:]

    async def ask(compact: bool) -> Reply:
        return await loop.provider.complete("judge", judge_messages(window, compact=compact), [],
                                            state.view(loop.run_input))
    try:
        judged = await ask(False)
    except ContextTooLong as exc:
        loop.journal.emit("context_masked", {
            "alias": "judge", "reason": "context_too_long", "error": str(exc)[:300],
            "compact": True, "retry": 1}, parent=step)
        try:
            judged = await ask(True)
        except ContextTooLong as again:
            return "stalled", (f"{UNREADABLE}: the judge's prompt was too long for its model "
                               f"even shortened ({str(again)[:200]})")
    state.judge_calls += 1
    count_usage(state, loop.journal, "judge", judged, step)
    return parse_verdict(judged.text)


def record_reply(journal: RunJournal, reply: Reply, step: int) -> None:
    if reply.reasoning:
        journal.emit("reasoning_delta", {"text": reply.reasoning}, parent=step)
    if reply.text and not reply.streamed:  # streamed text was journaled as it came
        journal.emit("content_delta", {"text": reply.text}, parent=step)


def gathered_summary(state: RunState) -> str:
    tools = [m for m in state.messages if m.role == "tool"]
    return f"{len(tools)} tool results; the last answer was: {last_answer(state)[:300] or 'none'}"


def last_answer(state: RunState) -> str:
    for message in reversed(state.messages):
        if message.role == "assistant" and message.content and not message.injected:
            return message.content
    return ""
