"""The agent loop: model turn, tool calls, journal, until the model stops.

A turn with tool calls runs them (each journaled as tool_start + tool_complete, or as a
refusal) and goes round again. A turn with no tool call is the only place a run can stop;
that is where the stop gate sits. No transaction is open across a model or tool call: the
journal appends in its own short transactions between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from sql import failpoints
from sql.journal import RunJournal
from worker.model import Message, ModelProvider, Reply, ToolCall
from worker.state import RunState
from worker.toolbox import ToolBox

ROOT_SEQ = 1  # run_start, written with the claim


@dataclass
class RunOutcome:
    status: str  # completed | failed
    outcome: str  # done | question | stalled_out | hard_stop | failed
    reason: str | None
    answer: str


# Decides what a turn without tool calls means. Returns None to stop the run as done, or a
# message to inject before the next turn. The stop gate plugs in here.
StopHook = Callable[[RunState, Reply, int], Awaitable[RunOutcome | Message | None]]


async def stop_when_model_stops(state: RunState, reply: Reply, step: int) -> RunOutcome | None:
    return RunOutcome("completed", "done", None, reply.text)


async def run_agent(state: RunState, *, run_input: dict[str, Any], provider: ModelProvider,
                    toolbox: ToolBox, journal: RunJournal, max_turns: int,
                    on_stop: StopHook = stop_when_model_stops) -> RunOutcome:
    while state.model_turns < max_turns:
        step = journal.emit("step_start", {"turn": state.model_turns + 1}, parent=ROOT_SEQ)
        reply = await provider.complete("default", state.messages, toolbox.schemas(),
                                        state.view(run_input))
        state.model_turns += 1
        record_reply(journal, reply, step)
        state.messages.append(Message("assistant", reply.text, list(reply.tool_calls)))
        if not reply.tool_calls:
            decision = await on_stop(state, reply, step)
            if isinstance(decision, RunOutcome):
                return decision
            if decision is not None:
                state.messages.append(decision)
        for call in reply.tool_calls:
            state.messages.append(await run_tool_call(call, toolbox, journal, step))
        await journal.flush()
    return RunOutcome("completed", "hard_stop",
                      f"stopped after {max_turns} model turns without finishing",
                      last_answer(state))


def record_reply(journal: RunJournal, reply: Reply, step: int) -> None:
    if reply.reasoning:
        journal.emit("reasoning_delta", {"text": reply.reasoning}, parent=step)
    if reply.text:
        journal.emit("content_delta", {"text": reply.text}, parent=step)


async def run_tool_call(call: ToolCall, toolbox: ToolBox, journal: RunJournal,
                        step: int) -> Message:
    if toolbox.spec(call.name) is None:
        outcome = await toolbox.call(call, step=step)
        journal.emit("budget_refusal", {"tool": call.name, "wall": outcome.refused_by,
                                        "message": outcome.text, "call_id": call.id}, parent=step)
        return Message("tool", outcome.text, tool_call_id=call.id)
    started = journal.emit("tool_start", {"tool": toolbox.spec(call.name).key, "call_id": call.id,
                                          "arguments": call.arguments}, parent=step)
    outcome = await toolbox.call(call, step=step)
    await failpoints.hit("run.after_tool_effect_before_tool_complete")
    journal.emit("tool_complete", {"tool": toolbox.spec(call.name).key, "call_id": call.id,
                                   "ok": outcome.ok, "refused_by": outcome.refused_by,
                                   "duration_ms": outcome.duration_ms,
                                   "result_chars": len(outcome.text)}, parent=started)
    return Message("tool", outcome.text, tool_call_id=call.id)


def last_answer(state: RunState) -> str:
    for message in reversed(state.messages):
        if message.role == "assistant" and message.content:
            return message.content
    return ""
