"""A run's state: everything needed to continue it, serializable to Postgres."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from worker.model import Message, RunView

STATE_VERSION = 1


@dataclass
class RunState:
    messages: list[Message]
    model_turns: int = 0
    judge_calls: int = 0
    plan: dict[str, Any] = field(default_factory=lambda: {"steps": []})

    @classmethod
    def start(cls, instructions: str, run_input: dict[str, Any]) -> "RunState":
        return cls([Message("system", instructions or "You are a helpful agent."),
                    Message("user", task_text(run_input))])

    def view(self, run_input: dict[str, Any]) -> RunView:
        return RunView(run_input, self.model_turns, self.judge_calls)

    def to_state(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "messages": [m.to_state() for m in self.messages],
                "model_turns": self.model_turns, "judge_calls": self.judge_calls,
                "plan": self.plan}


def task_text(run_input: dict[str, Any]) -> str:
    """The user's task: input.prompt when given, else the input itself minus the scripted
    provider's directions (a real model should not read a script meant for a fake one)."""
    prompt = run_input.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt
    rest = {k: v for k, v in run_input.items() if k not in ("script", "judge")}
    return json.dumps(rest, sort_keys=True) if rest else "Do your task."
