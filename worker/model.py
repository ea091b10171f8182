"""What crosses the model seam: messages, tool calls, replies and the provider protocol.

Shapes follow OpenAI Chat Completions, which every provider speaks (the scripted one included),
so a run recorded with one provider reads the same with another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


def wire_name(tool: str) -> str:
    """Function names on the wire may not contain '.': demo.get_record -> demo__get_record."""
    return tool.replace(".", "__")


def canonical_name(tool: str) -> str:
    """One identity per tool: 'vendor.tool' and 'vendor__tool' are the same tool."""
    return tool.strip().replace("__", ".", 1)


@dataclass
class ToolCall:
    id: str  # the harness's own name for the call once the loop has it (never the model's)
    name: str  # canonical (vendor.tool)
    arguments: dict[str, Any]
    provider_id: str | None = None  # what the model called it: for logs only, never a key

    def to_state(self) -> dict[str, Any]:
        saved: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.provider_id is not None:
            saved["provider_id"] = self.provider_id
        return saved

    @classmethod
    def from_state(cls, saved: dict[str, Any]) -> "ToolCall":
        return cls(saved["id"], saved["name"], dict(saved["arguments"]), saved.get("provider_id"))

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": wire_name(self.name),
                             "arguments": json.dumps(self.arguments, sort_keys=True)}}


@dataclass
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    # Written by the harness (a nudge, a refusal, a terminal note), not by the model: never
    # metered, and not counted as a model turn.
    injected: bool = False

    def to_openai(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            # Some OpenAI-compatible servers reject null content on tool-call messages.
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message

    def to_state(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content, "injected": self.injected,
                "tool_call_id": self.tool_call_id,
                "tool_calls": [call.to_state() for call in self.tool_calls]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "Message":
        calls = [ToolCall.from_state(c) for c in state.get("tool_calls", [])]
        return cls(state["role"], state.get("content", ""), calls, state.get("tool_call_id"),
                   state.get("injected", False))


@dataclass(frozen=True)
class Usage:
    """Tokens one model call cost, as the provider reported them (OpenAI's prompt_tokens and
    completion_tokens)."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""
    usage: Usage | None = None  # None: the provider reported nothing
    streamed: bool = False  # the text already went out through on_text, piece by piece


class ContextTooLong(RuntimeError):
    """The provider refused the request because the messages exceed the model's context."""


class ModelUnavailable(RuntimeError):
    """The model endpoint is down for now (it could not be reached, answered 5xx or 429, went
    silent) after the provider's few quick retries: the run waits it out without a worker
    (worker/outage.py). retry_after: the server's Retry-After in seconds, if it gave one; the
    message is one sentence naming the failure, fit for a run's reason."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# Called with each piece of answer text as a streaming provider receives it.
TextSink = Callable[[str], None]


@dataclass(frozen=True)
class ToolSchema:
    name: str  # canonical
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": wire_name(self.name), "description": self.description,
            "parameters": self.parameters or {"type": "object", "properties": {}}}}


@dataclass
class RunView:
    """What a provider may know of the run besides the messages."""

    input: dict[str, Any]
    model_turns: int = 0  # replies already produced for this run by the non-judge aliases
    judge_calls: int = 0  # judge verdicts already given for this run


class ModelProvider(Protocol):
    async def complete(self, alias: str, messages: list[Message], tools: list[ToolSchema],
                       run: RunView, *, on_text: TextSink | None = None) -> Reply: ...
