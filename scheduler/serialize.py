"""Rows to the JSON shapes of the contract: timestamps in RFC 3339 UTC with a Z, ids as strings."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Iterable
from uuid import UUID


def utc_text(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, UUID):
        return str(value)
    return value


def pick(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: jsonable(row.get(name)) for name in names}


RUN_FIELDS = ("id", "agent_id", "schedule_id", "trigger_type", "trigger_source", "status",
              "outcome", "breadcrumb", "attempt", "retry_of", "scheduled_for", "created_at",
              "started_at", "finished_at", "fires", "max_attempts", "timeout_minutes", "reason",
              "deadline", "input", "answer")  # and "usage", which public_run fills in
AGENT_FIELDS = ("id", "name", "instructions", "tools", "auto_approve", "status", "model",
                "timeout_minutes", "max_tool_calls", "token_budget", "max_concurrent_runs",
                "created_at", "updated_at")
SCHEDULE_FIELDS = ("id", "agent_id", "cron", "timeout_minutes", "overlap", "max_attempts",
                   "display", "input", "status", "next_run", "last_run", "created_at",
                   "updated_at")
EVENT_FIELDS = ("seq", "parent_seq", "type", "payload", "ts")
HISTORY_FIELDS = ("scheduled_for", "kind", "reason", "execution_id", "status", "outcome",
                  "fires", "attempt", "recorded_at")


def parse_utc(text: str, field: str) -> datetime:
    """Accept only RFC 3339 UTC with a trailing Z: an offset or a naive time is refused."""
    from tickwork.sql.errors import InvalidInput

    if not _RFC3339_UTC.fullmatch(text):
        raise InvalidInput(f"{field} must be an RFC 3339 UTC time ending in Z, e.g. "
                           "2026-03-29T09:00:00Z; offsets and naive times are refused",
                           code="timezone_not_allowed", field=field)
    try:
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)
    except ValueError:
        raise InvalidInput(f"{field} {text[:40]!r} is not a real date and time", field=field)


_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z", re.ASCII)
