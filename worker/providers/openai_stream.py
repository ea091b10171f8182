"""Chat Completions answers read into one Reply: streamed chunks (text as it arrives, tool calls
from their fragments, usage from the final chunk) and whole bodies alike.

No I/O here: the openai provider hands over the lines of a Server-Sent Events stream or a parsed
body. Ids are passed through as the model sent them (a missing one is empty): the harness names
every call itself and keeps the model's id only for logs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from tickwork.worker.model import Reply, TextSink, ToolCall, Usage, canonical_name


class MalformedAnswer(ValueError):
    """The endpoint's answer does not have the shape of a chat completion."""


@dataclass
class _Fragments:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Feeds on the JSON chunks of one streamed completion (choice 0 only: we never ask for n>1)."""

    def __init__(self, on_text: TextSink | None = None) -> None:
        self._on_text = on_text
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _Fragments] = {}  # in order of first appearance
        self._last_index: int | None = None
        self.usage: Usage | None = None
        self.finished = False  # a finish_reason arrived: the answer itself is complete

    def feed(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise MalformedAnswer("a stream event is not a JSON object")
        usage = parse_usage(chunk.get("usage"))
        if usage is not None:  # some servers repeat a running total: the last one counts
            self.usage = usage
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta, dict):
                self._delta(delta)
            if choice.get("finish_reason"):
                self.finished = True

    def reply(self) -> Reply:
        calls = [ToolCall(f.id, canonical_name(f.name), parse_arguments("".join(f.arguments)),
                          provider_id=f.id or None) for f in self._calls.values()]
        return Reply(text="".join(self._text), tool_calls=calls,
                     reasoning="".join(self._reasoning), usage=self.usage, streamed=True)

    def _delta(self, delta: dict[str, Any]) -> None:
        text = _text(delta.get("content"))  # null while the model writes tool calls
        if text:
            self._text.append(text)
            if self._on_text is not None:
                self._on_text(text)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str):
            self._reasoning.append(reasoning)
        for fragment in delta.get("tool_calls") or []:
            if isinstance(fragment, dict):
                self._fragment(fragment)

    def _fragment(self, fragment: dict[str, Any]) -> None:
        given_id = fragment.get("id")
        given_id = str(given_id) if given_id not in (None, "") else ""
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # No index (a few servers): a new id starts a new call, anything else continues.
            starts = not self._calls or (given_id and given_id != self._calls[self._last_index].id)
            index = -len(self._calls) - 1 if starts else self._last_index  # negative: no clash
        call = self._calls.setdefault(index, _Fragments())
        self._last_index = index
        if given_id and not call.id:
            call.id = given_id  # ids are not split; a repeat of the same id is no new piece
        function = fragment.get("function") or {}
        name = function.get("name")
        if isinstance(name, str) and name and name != call.name:
            # OpenAI sends the name once; a server re-sending it whole must not double it.
            call.name = name if not call.name else call.name + name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:  # an object instead of JSON text
            call.arguments.append(json.dumps(arguments))


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event, data) per Server-Sent Event; multi-line data joined with newlines, comments
    (keep-alives) skipped. llama.cpp reports a failure mid-stream as an 'error:' field line."""
    event, data = "message", []
    async for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "data":
            data.append(value)
        elif key == "event":
            event = value
        elif key == "error":
            yield "error", value
    if data:
        yield event, "\n".join(data)


def parse_reply(data: Any) -> Reply:
    """A whole (not streamed) completion: choices[0].message as a Reply."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        message = None
    if not isinstance(message, dict):
        raise MalformedAnswer("the answer has no choices[0].message")
    calls = [parse_call(call) for call in message.get("tool_calls") or []]
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return Reply(text=_text(message.get("content")), tool_calls=calls,
                 reasoning=reasoning if isinstance(reasoning, str) else "",
                 usage=parse_usage(data.get("usage")))


def parse_call(call: Any) -> ToolCall:
    function = (call.get("function") if isinstance(call, dict) else None) or {}
    raw_id = call.get("id") if isinstance(call, dict) else None
    call_id = str(raw_id) if raw_id not in (None, "") else ""
    return ToolCall(call_id, canonical_name(str(function.get("name") or "")),
                    parse_arguments(function.get("arguments")), provider_id=call_id or None)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A dict of arguments; anything that is not a JSON object is kept as {"_raw": …} so the
    loop can refuse the call with the model's own text instead of guessing."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}  # servers send "" for a call without arguments
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_raw": raw}
    return {"_raw": json.dumps(raw)}


def parse_usage(raw: Any) -> Usage | None:
    """OpenAI's prompt_tokens/completion_tokens (a few servers say input/output_tokens)."""
    if not isinstance(raw, dict):
        return None
    prompt = raw.get("prompt_tokens", raw.get("input_tokens"))
    completion = raw.get("completion_tokens", raw.get("output_tokens"))
    if prompt is None and completion is None:
        return None
    return Usage(_count(prompt), _count(completion))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts, as a few servers answer
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text", ""), str))
    return ""
