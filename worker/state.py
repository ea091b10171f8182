"""A run's state: everything needed to continue it, serializable to Postgres for a suspension."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tickwork.worker.compaction import Summary
from tickwork.worker.model import Message, RunView, ToolCall, Usage
from tickwork.worker.redact import redact, redact_text
from tickwork.worker.walls import Meter

STATE_VERSION = 1


class CorruptState(ValueError):
    """Saved state that this worker cannot continue from (corrupt, or another version)."""


# An agent without instructions of its own gets these: the seeds' ladder of three rungs.
DEFAULT_INSTRUCTIONS = (
    "You are a helpful agent. Work by the ladder: answer directly when you can; call one tool "
    "for one action; and when the same tool is needed across a list (a loop), write the loop "
    "once in code with run_python, where tools.call(name, **arguments) calls your tools and "
    "variables persist between calls.")

@dataclass
class Pending:
    """The tool calls of the turn that paused, the first of them awaiting a decision."""

    step: int
    calls: list[ToolCall]


@dataclass
class RunState:
    messages: list[Message]
    model_turns: int = 0
    judge_calls: int = 0
    plan: dict[str, Any] = field(default_factory=lambda: {"steps": []})
    meter: Meter = field(default_factory=Meter)
    units_left: int = 20
    pending: Pending | None = None
    # What the model calls cost so far (judge included), as the providers reported it.
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    # Set once the provider said the context was too long: from then on only the newest
    # turn's tool results are sent whole.
    context_tight: bool = False
    # The summary that replaces the older messages in what is sent (worker/compaction.py),
    # the input tokens the latest agent call reported (what decides the next compaction), and
    # how often the summariser failed (past a limit it is not asked again).
    summary: Summary | None = None
    last_input_tokens: int | None = None
    compaction_failures: int = 0
    # The tools whose schemas the run loaded (load_tools, worker/tool_index.py): bound for the
    # rest of the run, so every later call carries them.
    loaded_tools: list[str] = field(default_factory=list)
    # A model outage being waited out (worker/outage.py): when it began (epoch seconds, the
    # first failed call) and how many waits so far; cleared by the next call that answers.
    outage_since: float | None = None
    outage_waits: int = 0
    # Set while the stop gate asks its judge: a run parked by an outage there judges the same
    # answer again when it is taken back, instead of asking its model for a new one.
    gate_step: int | None = None

    @classmethod
    def start(cls, instructions: str, run_input: dict[str, Any], *, units: int,
              earlier: list[Message] = ()) -> "RunState":
        """earlier: a conversation that came before this run's task (a chat's messages)."""
        return cls([Message("system", instructions or DEFAULT_INSTRUCTIONS), *earlier,
                    Message("user", task_text(run_input))], units_left=units)

    def view(self, run_input: dict[str, Any]) -> RunView:
        return RunView(run_input, self.model_turns, self.judge_calls)

    def add_usage(self, usage: Usage | None) -> None:
        """Count one model call and what it cost (nothing when the provider reported nothing).
        A call that answered ends any outage being waited out."""
        self.outage_since, self.outage_waits = None, 0
        self.model_calls += 1
        if usage is not None:
            self.input_tokens += max(0, int(usage.input_tokens))
            self.output_tokens += max(0, int(usage.output_tokens))

    @property
    def tokens_used(self) -> int:
        return self.input_tokens + self.output_tokens

    def usage(self) -> dict[str, int]:
        """The run's usage as DESIGN names it (the execution row's usage column)."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "model_calls": self.model_calls}

    def to_state(self) -> dict[str, Any]:
        pending = None
        if self.pending is not None:
            pending = {"step": self.pending.step,
                       "calls": [call.to_state() for call in self.pending.calls]}
        return {"version": STATE_VERSION, "messages": [at_rest(m) for m in self.messages],
                "model_turns": self.model_turns, "judge_calls": self.judge_calls,
                "plan": self.plan, "meter": self.meter.to_state(), "units_left": self.units_left,
                "pending": pending, "usage": self.usage(),
                "context_tight": self.context_tight, "summary": _summary_at_rest(self.summary),
                "last_input_tokens": self.last_input_tokens,
                "compaction_failures": self.compaction_failures,
                "loaded_tools": list(self.loaded_tools), "outage_since": self.outage_since,
                "outage_waits": self.outage_waits, "gate_step": self.gate_step}

    @classmethod
    def from_state(cls, saved: Any) -> "RunState":
        if not isinstance(saved, dict) or saved.get("version") != STATE_VERSION:
            version = saved.get("version") if isinstance(saved, dict) else None
            raise CorruptState(f"saved run state has version {version!r}; this worker continues "
                               f"version {STATE_VERSION} only")
        try:
            pending = saved["pending"]
            usage = saved.get("usage") or {}  # absent in states saved before usage was kept
            return cls(messages=[Message.from_state(m) for m in saved["messages"]],
                       model_turns=int(saved["model_turns"]), judge_calls=int(saved["judge_calls"]),
                       plan=dict(saved["plan"]), meter=Meter.from_state(saved["meter"]),
                       units_left=int(saved["units_left"]),
                       pending=None if pending is None else Pending(
                           int(pending["step"]),
                           [ToolCall.from_state(c) for c in pending["calls"]]),
                       input_tokens=int(usage.get("input_tokens", 0)),
                       output_tokens=int(usage.get("output_tokens", 0)),
                       model_calls=int(usage.get("model_calls", 0)),
                       context_tight=bool(saved.get("context_tight", False)),
                       loaded_tools=[str(name) for name in saved.get("loaded_tools", [])],
                       # Absent in states saved before compaction: none yet.
                       summary=_summary_from(saved.get("summary")),
                       last_input_tokens=_count_or_none(saved.get("last_input_tokens")),
                       compaction_failures=int(saved.get("compaction_failures", 0)),
                       outage_since=_number_or_none(saved.get("outage_since"), float),
                       outage_waits=int(saved.get("outage_waits") or 0),
                       gate_step=_number_or_none(saved.get("gate_step"), int))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptState(f"saved run state is unreadable ({type(exc).__name__}: {exc})")


def _summary_at_rest(summary: Summary | None) -> dict[str, Any] | None:
    """The summary as saved: model-written text, redacted like the assistant's own."""
    if summary is None:
        return None
    return {"text": redact_text(summary.text), "upto": summary.upto,
            "messages": summary.messages}


def _summary_from(saved: Any) -> Summary | None:
    if saved is None:
        return None
    text, upto, count = saved["text"], int(saved["upto"]), int(saved["messages"])
    if not isinstance(text, str) or upto < 0 or count < 0:
        raise ValueError("the saved summary is not {text, upto, messages}")
    return Summary(text, upto, count)


def _count_or_none(value: Any) -> int | None:
    return None if value is None else max(0, int(value))


def _number_or_none(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def at_rest(message: Message) -> dict[str, Any]:
    """A history message as saved: the model's text and its tool calls' arguments redacted. The
    real arguments a waiting call needs are kept once, in ``pending``; the history's copies are
    for the model to read back, and a secret must not stay at rest in them."""
    saved = message.to_state()
    if message.role == "assistant":
        saved["content"] = redact_text(saved["content"] or "")
        for call in saved["tool_calls"]:
            call["arguments"] = redact(call["arguments"])
    return saved


# Keys of a run's input that direct tickwork, never the model: the scripted provider's script
# and verdicts, and the chat a chat run belongs to.
_NOT_FOR_THE_MODEL = ("script", "judge", "summary", "chat_id")


def task_text(run_input: dict[str, Any]) -> str:
    """The user's task: input.message (the person's plain text) with the rest of the input
    beside it as data; else input.prompt when given; else the input itself. Never the scripted
    provider's directions (a real model should not read a script meant for a fake one)."""
    message = run_input.get("message")
    if isinstance(message, str) and message:
        rest = {k: v for k, v in run_input.items()
                if k not in _NOT_FOR_THE_MODEL and k != "message"}
        if not rest:
            return message
        return f"{message}\n\nInput data (JSON): {json.dumps(rest, sort_keys=True)}"
    prompt = run_input.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt
    rest = {k: v for k, v in run_input.items() if k not in _NOT_FOR_THE_MODEL}
    return json.dumps(rest, sort_keys=True) if rest else "Do your task."
