"""structlog set up once per process: JSON lines with a timestamp and level, secrets redacted."""

import logging

import structlog

from worker.redact import redact


def redact_secrets(_, __, event_dict: dict) -> dict:
    """No secret-shaped string reaches a log line (an error text can carry a key or a URL with a
    password in it)."""
    return redact(event_dict)


def configure_logging(level: str = "info") -> None:
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), redact_secrets,
                    structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
    )
