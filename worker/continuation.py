"""A retry continues its chain: the conversation rebuilt from what earlier attempts journaled.

A run released at shutdown, past its deadline, or lost with its worker is retried as a new
execution (retry_of). That attempt must not start from scratch: a send that completed would be
sent again. So a retry rebuilds its state from the chain's journals and tool-call store:

- every model turn that finished: the assistant's text and its tool calls;
- each call's result: the stored one for calls with effects (every class but read), the
  refusal text for refused calls; a read's result is not stored, so the last turn's reads run
  again (reads may repeat) and older ones read as a stub, like masked results;
- the meters (walls), the plan, the stop gate's units and the model usage of every attempt, so
  budgets and the chain's usage count every attempt.

A call of the last turn whose result is unknown (it started, or never started, before the
attempt ended) is pending again under the same harness name, so its vendor sees the same
idempotency key and the store answers for it if it did complete. A pending call whose
journaled arguments were redacted is not run again with the redacted text: the model is told
it was interrupted and may or may not have taken effect.

The chain's root (its first attempt) keys the tool-call store and the vendors' idempotency
keys: the same call is the same key in every attempt. A retry's own calls are named with its
attempt number (call_{attempt}_{step}_{index}), so no two attempts name two calls alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.journal import events_after
from tickwork.worker.model import Message, ToolCall, canonical_name
from tickwork.worker.state import Pending, RunState
from tickwork.worker.tools import local
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.walls import WallSettings, check_call, record_call

PAGE = 1000
READ_NOT_KEPT = ("[the result of this read, made by an earlier attempt of the run, was not "
                 "kept; call it again if you need it]")
INTERRUPTED = ("The call to {tool} was interrupted when the run was handed to another worker, "
               "before its result was recorded. It may or may not have taken effect: check "
               "before repeating it, or continue without it.")
REDACTED_MARK = "[REDACTED"


@dataclass(frozen=True)
class Chain:
    """A run's place in its chain: the root's id and the earlier attempts (oldest first)."""

    root: UUID
    earlier: list[UUID]

    @classmethod
    def alone(cls, execution_id: UUID) -> Chain:
        return cls(execution_id, [])


async def load_chain(pool: AsyncConnectionPool, execution_id: UUID, attempt: int) -> Chain:
    """The chain of a run; a first attempt is its own root (no query)."""
    if attempt <= 1:
        return Chain.alone(execution_id)
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["list_earlier_attempts"],
                                    {"execution_id": execution_id})
        earlier = [row["id"] for row in await cursor.fetchall()]
    return Chain(earlier[0] if earlier else execution_id, earlier)


def call_prefix(attempt: int) -> str:
    """How an attempt names its calls: call_{step}_{index}, or with its attempt after the first."""
    return "call" if attempt <= 1 else f"call_{attempt}"


@dataclass
class SeenCall:
    id: str
    tool: str
    arguments: dict[str, Any]
    started: bool = False
    completed: bool = False
    ok: bool = False
    refusal: str | None = None  # the text the model got for a refused or rejected call


@dataclass
class SeenTurn:
    text: str = ""
    warning: str | None = None
    calls: list[SeenCall] = field(default_factory=list)
    gate_seen: bool = False
    gate_injected: str | None = None


@dataclass
class Replay:
    """The chain's journals read in order, turn by turn (each attempt's seqs are its own)."""

    turns: list[SeenTurn] = field(default_factory=list)
    calls: dict[str, SeenCall] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=lambda: {
        "input_tokens": 0, "output_tokens": 0, "model_calls": 0})
    judge_calls: int = 0
    units_left: int | None = None
    context_tight: bool = False

    def read_attempt(self, events: list[dict[str, Any]]) -> None:
        by_step: dict[int, SeenTurn] = {}
        for event in events:
            self._read(event, by_step)

    def _read(self, event: dict[str, Any], by_step: dict[int, SeenTurn]) -> None:
        kind, payload, parent = event["type"], event["payload"] or {}, event["parent_seq"]
        if kind == "step_start":
            if payload.get("continues") and self.turns:  # the last turn's calls, run again
                by_step[event["seq"]] = self.turns[-1]
            else:
                turn = SeenTurn(warning=payload.get("turn_warning"))
                self.turns.append(turn)
                by_step[event["seq"]] = turn
            return
        if kind == "model_usage":
            for key in ("input_tokens", "output_tokens"):
                self.usage[key] += max(0, int(payload.get(key) or 0))
            self.usage["model_calls"] += 1
            self.judge_calls += payload.get("alias") == "judge"
            return
        if kind == "context_masked" and payload.get("keep_turns") == 1:
            self.context_tight = True
            return
        if kind == "gate_decision" and isinstance(payload.get("units_left"), int):
            self.units_left = payload["units_left"]
        turn = by_step.get(parent) if parent is not None else None
        call_id = payload.get("call_id")
        if kind == "tool_complete":
            seen = self.calls.get(call_id)
            if seen is not None:
                seen.completed, seen.ok = True, bool(payload.get("ok"))
            return
        if turn is None:
            return
        if kind == "content_delta" and not payload.get("injected"):
            turn.text += str(payload.get("text") or "")
        elif kind == "gate_decision":
            turn.gate_seen, turn.gate_injected = True, payload.get("injected")
        elif kind in ("tool_start", "approval_required", "budget_refusal") and call_id:
            seen = self._call(turn, call_id, payload)
            if kind == "tool_start":
                seen.started = True
            elif kind == "budget_refusal":
                seen.refusal = str(payload.get("message") or "")

    def _call(self, turn: SeenTurn, call_id: str, payload: dict[str, Any]) -> SeenCall:
        seen = self.calls.get(call_id)
        if seen is None:
            arguments = payload.get("arguments")
            seen = SeenCall(call_id, canonical_name(str(payload.get("tool") or "")),
                            arguments if isinstance(arguments, dict) else {})
            self.calls[call_id] = seen
            turn.calls.append(seen)
        elif isinstance(payload.get("arguments"), dict):
            seen.arguments = payload["arguments"]
        return seen


async def rebuild_state(pool: AsyncConnectionPool, chain: Chain, start: RunState, *,
                        spec_of: Callable[[str], ToolSpec | None],
                        walls: WallSettings) -> RunState:
    """``start`` (the run's first messages) continued with everything the chain's earlier
    attempts did; its pending calls, if any, are the last turn's calls still to run."""
    replay = Replay()
    async with pool.connection() as conn:
        for execution_id in chain.earlier:
            after = 0
            while True:
                page = await events_after(conn, execution_id, after, PAGE)
                replay.read_attempt(page)
                if len(page) < PAGE:
                    break
                after = page[-1]["seq"]
        cursor = await conn.execute(QUERIES["list_tool_call_results_of_chain"],
                                    {"execution_ids": [chain.root, *chain.earlier]})
        stored = {row["tool_call_id"]: (row["result"], row["ok"])
                  for row in await cursor.fetchall()}
    return await _continued(start, replay, stored, spec_of, walls)


async def _continued(state: RunState, replay: Replay, stored: dict[str, tuple[str, bool]],
                     spec_of: Callable[[str], ToolSpec | None],
                     walls: WallSettings) -> RunState:
    finished = [t for t in replay.turns if t.calls or (t.text and t.gate_seen)]
    for number, turn in enumerate(finished, start=1):
        if turn.warning:
            state.messages.append(Message("user", turn.warning, injected=True))
        calls = [ToolCall(c.id, c.tool, c.arguments) for c in turn.calls]
        state.messages.append(Message("assistant", turn.text, calls))
        state.model_turns += 1
        if turn.gate_injected:
            state.messages.append(Message("user", turn.gate_injected, injected=True))
        unresolved = []
        for seen in turn.calls:
            await _meter(seen, state, spec_of, walls)
            text = _known_result(seen, stored, spec_of, last=number == len(finished))
            if text is None:
                unresolved.append(seen)
            else:
                state.messages.append(Message("tool", text, tool_call_id=seen.id))
        if unresolved:  # only the last turn leaves calls to run
            state.pending = Pending(0, [ToolCall(c.id, c.tool, c.arguments) for c in unresolved])
    state.input_tokens = replay.usage["input_tokens"]
    state.output_tokens = replay.usage["output_tokens"]
    state.model_calls = replay.usage["model_calls"]
    state.judge_calls = replay.judge_calls
    state.context_tight = replay.context_tight
    if replay.units_left is not None:
        state.units_left = replay.units_left
    return state


def _known_result(seen: SeenCall, stored: dict[str, tuple[str, bool]],
                  spec_of: Callable[[str], ToolSpec | None], *, last: bool) -> str | None:
    """What the model was told of the call, or None when it must run (again)."""
    if seen.id in stored:
        return stored[seen.id][0]
    if seen.refusal is not None:
        return seen.refusal
    spec = spec_of(seen.tool)
    repeatable = spec is not None and (spec.is_local or spec.tool_class == "read")
    if repeatable and seen.completed and not last:
        return READ_NOT_KEPT
    if REDACTED_MARK in json.dumps(seen.arguments, default=str):
        return json.dumps({"error": INTERRUPTED.format(tool=seen.tool)})
    return None


async def _meter(seen: SeenCall, state: RunState, spec_of: Callable[[str], ToolSpec | None],
                 walls: WallSettings) -> None:
    """The walls' meters as the call left them, the plan as update_plan left it, and the
    tools load_tools bound."""
    spec = spec_of(seen.tool)
    if spec is None:
        state.meter.external_attempts += 1
        return
    call = ToolCall(seen.id, seen.tool, seen.arguments)
    record_call(call, spec, state.meter, check_call(call, spec, state.meter, walls))
    if not (seen.completed and seen.ok):
        return
    if spec.key == "update_plan":
        try:
            await local.update_plan(state.plan, seen.arguments.get("steps"))
        except local.ToolInputError:
            pass  # it failed the first time too
    elif spec.key == "load_tools":  # bound again: the retry's calls carry their schemas
        names = seen.arguments.get("names")
        for name in names if isinstance(names, list) else []:
            found = spec_of(canonical_name(str(name)))
            if found is not None and not found.is_local and found.key not in state.loaded_tools:
                state.loaded_tools.append(found.key)
