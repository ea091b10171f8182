"""A run's log lines: the run's ids on every line, at no cost until a line is written.

structlog's module-level logger is a lazy proxy that assembles a new bound logger on every
bind and every call (the processes keep it so because a test may reconfigure logging), which
cost a worker more CPU per run than the one line a run writes at info. A run therefore binds
nothing: its lines go through one assembled logger per process, assembled again only when
logging is reconfigured, with the ids rendered when a line is written.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


class _Assembled:
    """The process's assembled logger, as of the last configuration it saw."""

    def __init__(self) -> None:
        self._logger: Any = None
        self._made_for: tuple[int, Any] | None = None

    def get(self) -> Any:
        config = structlog.get_config()
        made_for = (id(config["processors"]), config["wrapper_class"])
        if made_for != self._made_for:
            self._logger, self._made_for = structlog.get_logger().bind(), made_for
        return self._logger


_ASSEMBLED = _Assembled()


class RunLog:
    """Log lines of one run (execution, agent, schedule, attempt on each)."""

    __slots__ = ("_run", "_ids")

    def __init__(self, run: Any) -> None:
        self._run, self._ids = run, None

    def ids(self) -> dict[str, Any]:
        if self._ids is None:
            run = self._run
            # The ids as they are: the line's JSON writes a UUID as its text, and redaction
            # does not scan one (tickwork/logs.py); a run without a schedule shows null.
            self._ids = {"execution_id": run.id, "agent_id": run.agent_id,
                         "schedule_id": run.schedule_id, "attempt": run.attempt}
        return self._ids

    def debug(self, event: str, **fields: Any) -> None:
        logger = _ASSEMBLED.get()
        if logger.is_enabled_for(logging.DEBUG):
            logger.debug(event, **self.ids(), **fields)

    def info(self, event: str, **fields: Any) -> None:
        _ASSEMBLED.get().info(event, **self.ids(), **fields)

    def warning(self, event: str, **fields: Any) -> None:
        _ASSEMBLED.get().warning(event, **self.ids(), **fields)
