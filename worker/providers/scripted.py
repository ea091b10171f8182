"""The scripted model: a real provider whose replies are read from the run's input.

It is stateless on purpose: its position in the script is the run's own counter (`model_turns`,
or `judge_calls` for the judge), which the agent loop persists, so a run resumed on another
worker continues the script exactly where it stopped. Replies have the shapes the openai provider
returns (canonical names, dict arguments, string ids), so the loop cannot tell them apart.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from tickwork.sql import failpoints
from tickwork.worker.model import (ContextTooLong, Message, Reply, RunView, TextSink, ToolCall,
                                   ToolSchema, Usage, canonical_name)

JUDGE_ALIAS = "judge"
SUMMARY_ALIAS = "summary"
_SUMMARY_KEYS = {"text", "usage", "fail"}
MAX_REPEAT = 100_000
LAST_FILE_REF = "$last_file_ref"
PARSED_SCRIPTS_KEPT = 10_000  # about the runs a worker holds in flight
_PLAIN_KEYS = {"text", "tool_calls", "usage"}
_CALL_KEYS = {"name", "arguments", "id"}
_USAGE_KEYS = {"input_tokens", "output_tokens"}
# A call without an "id" gets call_{turn}_{index}; a script may give its own (duplicated,
# reused, odd, or null for missing) to play a model whose ids cannot be trusted.
_OWN_ID = object()
_REPEAT_KEYS = {"tool", "times", "vary", "arguments"}


class ScriptError(ValueError):
    """The run's script is malformed; the message names the turn and becomes the failure reason."""


class ScriptedFailure(RuntimeError):
    """A failure the script asked for (``input.summary.fail``), as a provider's would be."""


@dataclass(frozen=True)
class Turn:
    text: str
    calls: tuple[tuple[str, dict[str, Any], Any], ...] = ()  # (name, arguments, id or _OWN_ID)
    usage: Usage | None = None  # what the script says this turn cost


DONE = Turn("Done.")


@dataclass(frozen=True)
class _Segment:
    """The turns one script entry yields: a plain turn (count 1) or a repeat (count K).

    Kept unexpanded so `times: 100000` costs nothing; `make(i)` builds turn i (1..count).
    """

    delay: float  # slept before the segment's first turn only
    count: int
    make: Callable[[int], Turn]


def parse_script(raw: Any) -> list[_Segment]:
    """Validate the whole script up front, so a bad turn fails the run on its first turn."""
    if raw is None or raw == []:
        return [_Segment(0.0, 1, lambda _i: DONE)]
    if not isinstance(raw, list):
        raise ScriptError(f"The script must be a list of turns, not {type(raw).__name__}.")
    segments: list[_Segment] = []
    pending = 0.0  # sleeps accumulate onto the turn that follows them
    for index, entry in enumerate(raw):
        kind = _kind(index, entry)
        if kind == "sleep":
            pending += _sleep_seconds(index, entry["sleep"])
            continue
        if kind == "repeat":
            count, make = _repeat(index, entry["repeat"])
        else:
            turn = _plain(index, entry)
            count, make = 1, (lambda _i, turn=turn: turn)
        segments.append(_Segment(pending, count, make))
        pending = 0.0
    if pending or not segments:
        # A trailing sleep delays the next turn, which is the first repeat of the last turn.
        last = segments[-1] if segments else _Segment(0.0, 1, lambda _i: DONE)
        segments.append(_Segment(pending, 1, lambda _i: last.make(last.count)))
    return segments


def turn_at(segments: list[_Segment], position: int) -> tuple[float, Turn]:
    """(delay, turn) for the 0-based position; past the end the last turn repeats, unslept."""
    start = 0
    for segment in segments:
        if position < start + segment.count:
            offset = position - start
            return (segment.delay if offset == 0 else 0.0), segment.make(offset + 1)
        start += segment.count
    last = segments[-1]
    return 0.0, last.make(last.count)


def _kind(index: int, entry: Any) -> str:
    keys = set(entry) if isinstance(entry, dict) else None
    if keys == {"sleep"}:
        return "sleep"
    if keys == {"repeat"}:
        return "repeat"
    if keys and keys <= _PLAIN_KEYS:
        return "plain"
    shape = sorted(keys) if keys is not None else type(entry).__name__
    raise ScriptError(f"Script turn {index} has an unknown shape ({shape}); expected "
                      "text and/or tool_calls, repeat, or sleep.")


def _sleep_seconds(index: int, seconds: Any) -> float:
    if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds) or seconds < 0):
        raise ScriptError(f"Script turn {index} sleeps {seconds!r}; a sleep must be a "
                          "non-negative number of seconds.")
    return float(seconds)


def _plain(index: int, entry: dict[str, Any]) -> Turn:
    text = entry.get("text", "")
    if not isinstance(text, str):
        raise ScriptError(f"Script turn {index} has a text that is not a string.")
    usage = _usage(index, entry["usage"]) if "usage" in entry else None
    if "tool_calls" not in entry:
        return Turn(text, usage=usage)
    calls = entry["tool_calls"]
    if not isinstance(calls, list) or not calls:
        raise ScriptError(f"Script turn {index} has tool_calls that are not a non-empty list.")
    return Turn(text, tuple(_call(index, call) for call in calls), usage)


def _call(index: int, call: Any) -> tuple[str, dict[str, Any], Any]:
    if not isinstance(call, dict) or not set(call) <= _CALL_KEYS:
        raise ScriptError(f"Script turn {index} has a tool call that is not "
                          '{"name": ..., "arguments": {...}} (and optionally "id").')
    own_id = call.get("id", _OWN_ID)
    if own_id is not _OWN_ID and own_id is not None and not isinstance(own_id, str):
        raise ScriptError(f"Script turn {index} has a tool call id that is not a string.")
    return (_tool_name(index, call.get("name")), _arguments(index, call.get("arguments", {})),
            own_id)


def _usage(index: int, usage: Any) -> Usage:
    if (not isinstance(usage, dict) or set(usage) != _USAGE_KEYS or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in usage.values())):
        raise ScriptError(f"Script turn {index} has a usage that is not "
                          '{"input_tokens": n, "output_tokens": n} with whole numbers.')
    return Usage(usage["input_tokens"], usage["output_tokens"])


def _repeat(index: int, spec: Any) -> tuple[int, Callable[[int], Turn]]:
    if not isinstance(spec, dict) or not set(spec) <= _REPEAT_KEYS:
        raise ScriptError(f"Script turn {index} has a repeat that is not "
                          '{"tool", "times", "vary", "arguments"}.')
    name = _tool_name(index, spec.get("tool"))
    times = spec.get("times")
    if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= MAX_REPEAT:
        raise ScriptError(f"Script turn {index} repeats {times!r} times; times must be an "
                          f"integer from 1 to {MAX_REPEAT}.")
    vary = spec.get("vary")
    if vary is not None and (not isinstance(vary, str) or not vary):
        raise ScriptError(f"Script turn {index} has a vary that is not an argument name.")
    arguments = _arguments(index, spec.get("arguments", {}))

    def make(i: int) -> Turn:
        return Turn("", ((name, {**arguments, vary: i} if vary else arguments, _OWN_ID),))
    return times, make


def _tool_name(index: int, name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ScriptError(f"Script turn {index} has a tool call without a tool name.")
    return canonical_name(name)


def _arguments(index: int, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, dict):
        raise ScriptError(f"Script turn {index} has arguments that are not an object.")
    return arguments


def verdict_at(raw: Any, position: int) -> str:
    """The judge's verdict for its 0-based call: in order, then the last repeats; none → done."""
    if raw is None or raw == []:
        return "done"
    if not isinstance(raw, list):
        raise ScriptError(f"The judge script must be a list of verdicts, not {type(raw).__name__}.")
    for index, verdict in enumerate(raw):
        if not isinstance(verdict, str):
            raise ScriptError(f"Judge verdict {index} is not a string.")
    return raw[min(position, len(raw) - 1)]


def summary_reply(raw: Any, messages: list[Message]) -> Reply:
    """The summary alias's answer from ``input.summary``: absent, a fixed sentence naming how
    much transcript it read; a string, that text; an object ``{"text", "usage", "fail"}``
    (all optional): ``fail`` makes the call fail ("context_too_long" as a context refusal,
    anything else as a provider failure with that message)."""
    read = sum(len(m.content) for m in messages)
    if raw is None:
        return Reply(text=f"Scripted summary of the earlier conversation ({read} characters "
                          "read).")
    if isinstance(raw, str):
        return Reply(text=raw)
    if not isinstance(raw, dict) or not set(raw) <= _SUMMARY_KEYS:
        raise ScriptError('The summary script must be a string or {"text", "usage", "fail"}.')
    fail = raw.get("fail")
    if fail is not None:
        if fail == "context_too_long":
            raise ContextTooLong(f"maximum context length exceeded by the summary prompt "
                                 f"({read} characters)")
        raise ScriptedFailure(str(fail))
    text = raw.get("text", "Scripted summary of the earlier conversation.")
    if not isinstance(text, str):
        raise ScriptError("The summary script's text is not a string.")
    try:
        usage = _usage(0, raw["usage"]) if "usage" in raw else None
    except ScriptError:
        raise ScriptError('The summary script has a usage that is not {"input_tokens": n, '
                          '"output_tokens": n} with whole numbers.') from None
    return Reply(text=text, usage=usage)


def last_file_ref(messages: list[Message]) -> str | None:
    """The file reference of the most recent offloaded tool result, if any."""
    for message in reversed(messages):
        if message.role != "tool":
            continue
        try:
            content = json.loads(message.content)
        except ValueError:
            continue
        if isinstance(content, dict) and isinstance(content.get("file_ref"), str):
            return content["file_ref"]
    return None


def substitute(value: Any, file_ref: str | None) -> Any:
    """A deep copy of value with every "$last_file_ref" string replaced, at any depth."""
    if file_ref is None:
        return copy.deepcopy(value)
    if isinstance(value, dict):
        return {key: substitute(item, file_ref) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, file_ref) for item in value]
    return file_ref if value == LAST_FILE_REF else copy.deepcopy(value)


class ScriptedProvider:
    """ModelProvider replaying `run.input["script"]` (`run.input["judge"]` for the judge,
    `run.input["summary"]` for the summary).
    A run's script is parsed at its first turn and kept for its next ones (the run's input is
    the same object all along; a bounded number of scripts are kept, the oldest dropped)."""

    def __init__(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._sleep = sleep
        self._parsed: OrderedDict[int, tuple[Any, list[_Segment]]] = OrderedDict()

    def _segments(self, script: Any) -> list[_Segment]:
        kept = self._parsed.get(id(script))
        if kept is not None and kept[0] is script:  # held below, so its id is not reused
            return kept[1]
        segments = parse_script(script)
        self._parsed[id(script)] = (script, segments)
        if len(self._parsed) > PARSED_SCRIPTS_KEPT:
            self._parsed.popitem(last=False)
        return segments

    async def complete(self, alias: str, messages: list[Message], tools: list[ToolSchema],
                       run: RunView, *, on_text: TextSink | None = None) -> Reply:
        given = run.input or {}
        if alias == JUDGE_ALIAS:
            return Reply(text=verdict_at(given.get("judge"), run.judge_calls))
        if alias == SUMMARY_ALIAS:
            return summary_reply(given.get("summary"), messages)
        delay, turn = turn_at(self._segments(given.get("script")), run.model_turns)
        if delay > 0:
            # Tests: a worker whose scripted "thinking" must outlast whatever they do to it.
            await failpoints.hit("model.scripted_sleep")
            await self._sleep(delay)
        file_ref = last_file_ref(messages)
        # Ids carry the run's turn number, so they stay unique when the last turn repeats
        # (unless the script names them itself).
        calls = [ToolCall(f"call_{run.model_turns}_{j}" if own is _OWN_ID else (own or ""),
                          name, substitute(arguments, file_ref))
                 for j, (name, arguments, own) in enumerate(turn.calls)]
        return Reply(text=turn.text, tool_calls=calls, usage=turn.usage)
