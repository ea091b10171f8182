"""Compaction: the older part of a long conversation, replaced by a summary in what is sent.

Masking (worker/context.py) hides old tool results, but a conversation still grows by every
turn's text and calls. When a model call reports input tokens past a threshold (a fraction of
its alias's window, or a fixed number), or the provider refuses the messages as too long, the
messages older than the last few turns are summarised by the model (alias ``summary``; the
router falls back to ``default``) and what is sent becomes: the system message and the first
user task, the summary, then the recent turns verbatim. A tool call is never separated from
its result, and a turn keeps the user message that prompted it.

This module is the pure part: the limits, where to cut, the summary's prompt (built from
bounded text), what is sent, and a token estimate for the journal. The model call itself is
worker/model_turn.py's (``compact_context``). The run's state keeps the summary and where it
ends (``Summary``); the saved messages and the journal keep everything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from tickwork.worker.model import Message

SUMMARY_ALIAS = "summary"
DEFAULT_WINDOW = 8192
MIN_WINDOW = 256
CHARS_PER_TOKEN = 4  # a rough average for English text and JSON; only for estimates
# A summariser that failed this many times in a run is not asked again (masking goes on).
MAX_FAILURES = 2
# The summary's prompt takes at most half its alias's window, and never more than this.
PROMPT_CHARS_CAP = 48_000
MESSAGE_CHARS, MIN_MESSAGE_CHARS = 2000, 200  # one message of the transcript, at most / least
SUMMARY_CHARS = 6000  # a summary longer than this is cut (the prompt asks for far less)
_ALIAS = re.compile(r"[A-Za-z0-9_.-]+")
_SETTING = "TICKWORK_MODEL_CONTEXT_TOKENS"

SUMMARY_SYSTEM = """You compress the earlier part of an AI agent's conversation so that the \
agent can continue its task without it. Write a summary the agent will read instead of those \
messages: what it was asked, what it has done (which tools it called and what they returned \
that still matters: ids, numbers, names, file references), what it decided, and what remains \
to do. Keep facts exact; do not invent anything that is not in the transcript. If an earlier \
summary is given, fold it in. Plain text, at most 300 words, no preamble."""

SUMMARY_LEAD = ("[The earlier part of this conversation ({count} messages) was summarised to "
                "keep the context small; its full record is kept. Summary:]")


@dataclass(frozen=True)
class ContextLimits:
    """When to compact: the window of each alias ("" names the default for the others), the
    fraction of it that triggers a compaction, or a fixed threshold (0: use the fraction)."""

    windows: dict[str, int] = field(default_factory=lambda: {"": DEFAULT_WINDOW})
    fraction: float = 0.7
    fixed: int = 0

    def window(self, alias: str) -> int:
        return self.windows.get(alias) or self.windows.get("") or DEFAULT_WINDOW

    def compact_at(self, alias: str) -> int:
        """Reported input tokens at which a call of this alias starts a compaction."""
        return self.fixed or max(1, int(self.window(alias) * self.fraction))

    def prompt_chars(self) -> int:
        """How much transcript the summary's prompt may carry: half the summary alias's window."""
        return min(PROMPT_CHARS_CAP, self.window(SUMMARY_ALIAS) * CHARS_PER_TOKEN // 2)


def parse_context_windows(spec: str) -> dict[str, int]:
    """``N`` or ``alias=N`` entries, comma-separated; a bare N is the default for aliases not
    named (else 8192). Raises ValueError naming the bad entry."""
    windows: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        alias, equals, number = (part.strip() for part in entry.rpartition("="))
        if equals and not _ALIAS.fullmatch(alias):
            raise ValueError(f"{_SETTING} entry '{entry}' has no valid alias before '='.")
        if not number.isdigit() or int(number) < MIN_WINDOW:
            raise ValueError(f"{_SETTING} entry '{entry}' is not N or alias=N with N a whole "
                             f"number of tokens of at least {MIN_WINDOW}.")
        if alias in windows:
            named = f"the alias '{alias}'" if alias else "the default window"
            raise ValueError(f"{_SETTING} gives {named} twice.")
        windows[alias] = int(number)
    windows.setdefault("", DEFAULT_WINDOW)
    return windows


@dataclass
class Summary:
    """The run's summary of its messages before ``upto`` (the first ones excepted: the system
    message and the task are always sent); ``messages`` is how many it covers in all."""

    text: str
    upto: int
    messages: int


def head_length(messages: list[Message]) -> int:
    """How many leading messages are never summarised: up to and including the first user
    message (the system message and the task)."""
    for index, message in enumerate(messages):
        if message.role == "user":
            return index + 1
    return len(messages)


def split_point(messages: list[Message], start: int, keep_turns: int) -> int | None:
    """Where the recent part begins, so that ``messages[start:cut]`` is summarised: at the
    ``keep_turns``-th newest assistant turn, moved earlier over the user messages that prompted
    it and to the call of any result after it (a call and its result are never apart). None
    when nothing at or after ``start`` would be summarised."""
    keep_turns = max(1, keep_turns)
    turns = [i for i in range(start, len(messages)) if messages[i].role == "assistant"]
    if len(turns) <= keep_turns:
        return None
    owner = {call.id: index for index, message in enumerate(messages)
             if message.role == "assistant" for call in message.tool_calls}
    cut = turns[-keep_turns]
    while True:
        while cut > start and messages[cut - 1].role == "user":
            cut -= 1
        callers = [owner[m.tool_call_id] for m in messages[cut:]
                   if m.role == "tool" and m.tool_call_id in owner]
        earliest = min(callers, default=cut)
        if earliest >= cut:
            break
        cut = earliest  # a result after the cut whose call is before it: keep the call too
    return cut if cut > start else None


def outgoing(messages: list[Message], summary: Summary | None) -> list[Message]:
    """What the model is sent before masking: everything, or the head, the summary and the
    messages after it."""
    if summary is None:
        return messages
    head = head_length(messages)
    rest = messages[min(max(summary.upto, head), len(messages)):]
    lead = SUMMARY_LEAD.format(count=summary.messages)
    return [*messages[:head], Message("user", f"{lead}\n{summary.text}", injected=True), *rest]


def summary_prompt(previous: str | None, older: list[Message], budget: int) -> list[Message]:
    """The summariser's prompt: its instructions, then the earlier summary (if any) and the
    messages to fold in, each cut short so the transcript stays within ``budget`` characters
    (when even the shortest cuts do not fit, the oldest messages are left out and said so)."""
    limit = max(MIN_MESSAGE_CHARS, min(MESSAGE_CHARS, budget // max(1, len(older))))
    lines: list[str] = []
    used = 0
    for message in reversed(older):  # the newest first: they matter most to what comes next
        line = _render(message, limit)
        if lines and used + len(line) > budget:
            break
        lines.append(line)
        used += len(line) + 2
    left_out = len(older) - len(lines)
    parts = []
    if previous:
        parts.append(f"Earlier summary:\n{previous[:SUMMARY_CHARS]}")
    if left_out:
        parts.append(f"[{left_out} older messages are left out here for length.]")
    parts.append("Conversation to summarise (oldest first):\n\n" + "\n\n".join(reversed(lines)))
    parts.append("Write the summary now.")
    return [Message("system", SUMMARY_SYSTEM), Message("user", "\n\n".join(parts))]


def _render(message: Message, limit: int) -> str:
    role = f"{message.role} (harness)" if message.injected else message.role
    if message.role == "tool":
        role = f"tool result for {message.tool_call_id}"
    parts = [f"{role}: {_cut(message.content, limit)}"]
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
        parts.append(f"  -> calls {call.name} [{call.id}]({_cut(arguments, limit // 2)})")
    return _cut("\n".join(parts), 2 * limit)  # a turn of many calls is bounded too


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut, {len(text)} characters in all]"


def estimate_tokens(messages: list[Message]) -> int:
    """A rough count of the tokens these messages cost (characters / 4), for the journal."""
    chars = 0
    for message in messages:
        chars += len(message.content)
        for call in message.tool_calls:
            chars += len(call.name) + len(json.dumps(call.arguments, default=str))
    return chars // CHARS_PER_TOKEN
