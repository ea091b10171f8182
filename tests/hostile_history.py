"""What the real Chat Completions API refuses in a request's messages (it answers 400), for the
hostile test server (tests/hostile_model.py) and for tests asserting on recorded requests."""

from __future__ import annotations

import json
from typing import Any

MAX_ID_CHARS = 40  # OpenAI: "Expected a string with maximum length 40"
ROLES = {"system", "developer", "user", "assistant", "tool"}


def message_chars(messages: list[dict[str, Any]]) -> int:
    """The size a context limit is checked against: every message's text and call arguments."""
    total = 0
    for message in messages:
        content = message.get("content")
        total += len(content) if isinstance(content, str) else len(json.dumps(content or ""))
        for c in message.get("tool_calls") or []:
            total += len(str((c.get("function") or {}).get("arguments", "")))
    return total


def request_problem(body: Any, max_id_chars: int = MAX_ID_CHARS,
                    unique_across_history: bool = True) -> str | None:
    """Why the real API would refuse this request (400), or None."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "'messages' is a required property"
    return history_problem(body["messages"], max_id_chars, unique_across_history)


def history_problem(messages: list[Any], max_id_chars: int = MAX_ID_CHARS,
                    unique_across_history: bool = True) -> str | None:
    seen: set[str] = set()  # every call id of every earlier assistant message
    waiting: dict[str, bool] = {}  # the open assistant message's ids → answered yet
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return f"Invalid 'messages[{n}]': unknown or missing role."
        role = message["role"]
        if role == "tool":
            problem = _tool_problem(n, message, waiting)
            if problem:
                return problem
            continue
        unanswered = [i for i, answered in waiting.items() if not answered]
        if unanswered:
            return ("An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(unanswered)}")
        waiting = {}
        if role == "assistant":
            problem = _calls_problem(n, message, seen, max_id_chars, unique_across_history)
            if problem:
                return problem
            ids = [c["id"] for c in message.get("tool_calls") or []]
            waiting = {i: False for i in ids}
            seen.update(ids)
        elif not isinstance(message.get("content"), (str, list)):
            return f"Invalid 'messages[{n}].content': expected a string."
    unanswered = [i for i, answered in waiting.items() if not answered]
    if unanswered:
        return ("An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(unanswered)}")
    return None


def _tool_problem(n: int, message: dict[str, Any], waiting: dict[str, bool]) -> str | None:
    call_id = message.get("tool_call_id")
    if call_id not in waiting:
        return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                f"message with 'tool_calls' (messages[{n}].tool_call_id {call_id!r}).")
    if waiting[call_id]:
        return f"Invalid 'messages[{n}]': tool_call_id {call_id!r} was already answered."
    if not isinstance(message.get("content"), (str, list)):
        return f"Invalid 'messages[{n}].content': expected a string."
    waiting[call_id] = True
    return None


def _calls_problem(n: int, message: dict[str, Any], seen: set[str], max_id_chars: int,
                   unique_across_history: bool) -> str | None:
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if content is not None and not isinstance(content, (str, list)):
        return f"Invalid 'messages[{n}].content': expected a string or null."
    if content is None and not calls:
        return f"Invalid 'messages[{n}]': an assistant message needs content or tool_calls."
    ids: set[str] = set()
    for k, c in enumerate(calls):
        where = f"messages[{n}].tool_calls[{k}]"
        call_id = c.get("id") if isinstance(c, dict) else None
        if not isinstance(call_id, str) or not call_id:
            return f"Missing required parameter: '{where}.id'."
        if len(call_id) > max_id_chars:
            return (f"Invalid '{where}.id': string too long. Expected a string with maximum "
                    f"length {max_id_chars}, but got a string with length {len(call_id)} instead.")
        if call_id in ids:
            return f"Invalid '{where}.id': duplicate tool call id {call_id!r} in one message."
        if unique_across_history and call_id in seen:
            return f"Invalid '{where}.id': tool call id {call_id!r} was used by an earlier message."
        function = c.get("function") or {}
        if c.get("type") != "function" or not isinstance(function.get("name"), str):
            return f"Invalid '{where}': expected a function call with a name."
        if not isinstance(function.get("arguments"), str):
            return f"Invalid '{where}.function.arguments': expected a string."
        ids.add(call_id)
    return None
