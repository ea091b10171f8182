"""structlog set up once per process: JSON lines with a timestamp and level, secrets redacted."""

import functools
import json
import logging
import os
import re
import uuid

import orjson
import structlog

from tickwork.worker.redact import redact

# The level when none is given: TICKWORK_LOG_LEVEL, else info. At info a run writes one line
# (run_finished, or how else it ended); debug adds run_started.
LEVEL_VARIABLE = "TICKWORK_LOG_LEVEL"
LEVELS = ("debug", "info", "warning", "error", "critical")
# An id (a uuid under a key ending in _id) cannot hold a secret: it skips the redaction scan.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Short values repeat from line to line (event names, statuses, outcomes): each (key, value)
# is scanned once and the verdict remembered, a bounded number of them.
_CACHED_CHARS = 64
_NOT_SCANNED = (int, float, bool, type(None))  # redact returns these as they are, under any key
_SOME_UUID = uuid.UUID(int=0)


def _is_id(key: str, value: str) -> bool:
    return len(value) == 36 and key.endswith("_id") and _UUID.fullmatch(value) is not None


@functools.lru_cache(maxsize=4096)
def _short_value(key: str, value: str) -> str:
    return redact({key: value})[key]


@functools.lru_cache(maxsize=1024)
def _uuid_redacted_under(key: str) -> bool:
    """Whether redact() hides a UUID under this key (a secret key's, such as a run's token),
    asked once per key: under any other key a UUID (a run's ids) is shown as it is, and the
    JSON writes its text."""
    return redact({key: _SOME_UUID})[key] != _SOME_UUID


def redact_secrets(_, __, event_dict: dict) -> dict:
    """No secret-shaped string reaches a log line (an error text can carry a key or a URL with a
    password in it). The same verdicts as redact(event_dict), for less: a run's lines are
    mostly ids and a few repeated words."""
    shown = {}
    for key, value in event_dict.items():
        kind = type(value)
        if kind in _NOT_SCANNED:
            shown[key] = value
        elif kind is uuid.UUID and type(key) is str:  # a run's ids, as RunLog passes them
            shown[key] = redact({key: value})[key] if _uuid_redacted_under(key) else value
        elif kind is str and type(key) is str and len(value) <= _CACHED_CHARS:
            shown[key] = value if _is_id(key, value) else _short_value(key, value)
        else:
            shown[key] = redact({key: value})[key]
    return shown


def _dumps(event_dict: dict, **kwargs) -> str:
    """A log line's JSON: orjson (a worker writes a line per run), the standard library for
    what orjson refuses (a lone surrogate, a key that is not text)."""
    fallback = kwargs.get("default", str)
    try:
        return orjson.dumps(event_dict, default=fallback).decode()
    except TypeError:
        return json.dumps(event_dict, default=fallback)


def log_level(level: str | None = None) -> str:
    """The level asked for (else TICKWORK_LOG_LEVEL, else info), checked."""
    chosen = (level or os.environ.get(LEVEL_VARIABLE) or "info").strip().lower()
    if chosen not in LEVELS:
        raise ValueError(f"{LEVEL_VARIABLE} must be one of {', '.join(LEVELS)} (got {chosen!r})")
    return chosen


def configure_logging(level: str | None = None) -> None:
    try:
        chosen = log_level(level)
    except ValueError as exc:  # a process's start-up: one sentence, not a traceback
        raise SystemExit(str(exc)) from None
    # Redaction runs before the level and timestamp are added: they are ours and need no scan.
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, redact_secrets,
                    structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.JSONRenderer(serializer=_dumps)],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, chosen.upper())),
    )
