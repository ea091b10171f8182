"""What the model is sent: the run's messages with old tool results masked.

A message in the history is re-sent on every later turn, so a tool result the model read
several turns ago keeps costing tokens for the rest of the run. What is SENT masks the results
of every turn but the last few as a short stub naming the tool (and the stored result's file
reference, so read_file/query_file still reach it); the run's state and the journal keep
everything. Pure: no I/O, and the saved messages are never changed.
"""

from __future__ import annotations

import json
import re

from tickwork.worker.model import Message

# Offloaded results are named f_ + a UUID's 32 hex digits (worker/tools/offload.py).
_FILE_REF = re.compile(r"\bf_[0-9a-f]{32}\b")


def masked_for_model(messages: list[Message], keep_turns: int) -> list[Message]:
    """The messages with tool results masked, except those answering the newest
    ``keep_turns`` assistant turns that called tools (at least 1: the model always sees the
    results it is about to read). A result is masked only when the stub is shorter."""
    keep_turns = max(1, keep_turns)
    names: dict[str, str] = {}
    recent: set[str] = set()
    turns_seen = 0
    for message in reversed(messages):
        if message.role == "assistant" and message.tool_calls:
            turns_seen += 1
            for call in message.tool_calls:
                names[call.id] = call.name
                if turns_seen <= keep_turns:
                    recent.add(call.id)
    sent: list[Message] = []
    for message in messages:
        if message.role == "tool" and message.tool_call_id not in recent:
            stub = mask_stub(names.get(message.tool_call_id or "", "a tool"), message.content)
            if len(stub) < len(message.content):
                message = Message("tool", stub, tool_call_id=message.tool_call_id,
                                  injected=message.injected)
        sent.append(message)
    return sent


def mask_stub(tool: str, content: str) -> str:
    """A short stand-in for an old result: which tool, and its file reference if it has one."""
    stub = {"masked": True, "tool": tool,
            "note": "an older result, hidden to keep the context small; call the tool again "
                    "if you need it"}
    refs = list(dict.fromkeys(_FILE_REF.findall(content)))
    if refs:
        stub["file_ref"] = refs[0]  # the scripted provider's $last_file_ref reads this key
        stub["note"] = ("an older result, hidden to keep the context small; the full result "
                        "is stored: use read_file or query_file with file_ref")
    return json.dumps(stub, ensure_ascii=False)


def masked_count(sent: list[Message], messages: list[Message]) -> int:
    """How many tool results ``sent`` masks compared with ``messages``."""
    return sum(1 for a, b in zip(sent, messages) if a is not b)
