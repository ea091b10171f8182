"""structlog set up once per process: JSON lines with a timestamp and level."""

import logging

import structlog


def configure_logging(level: str = "info") -> None:
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
    )
