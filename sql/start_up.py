"""Waiting for Postgres while a process starts.

A process started beside its database (a deploy, a host's boot, `compose up`) may be up
before Postgres accepts connections, or start while it restarts. It waits: every failed try is
logged with its reason at once (a wrong password or host shows in the first line, not after the
wait), and after the wait (TICKWORK_DATABASE_WAIT_S) it gives up with that reason in one
sentence, DatabaseUnreachable, which the CLI prints without a traceback.

The wait only ever repeats a connection attempt, never a statement: what a process does once
connected is retried (or not) where it is done (sql/pool.py, db.reconnecting).
"""

from __future__ import annotations

from typing import NoReturn

import psycopg
import structlog
from tenacity import (AsyncRetrying, RetryCallState, Retrying, retry_if_exception_type,
                      stop_after_delay, wait_exponential)

log = structlog.get_logger()


class DatabaseUnreachable(psycopg.OperationalError):
    """No connection to Postgres within the start-up wait; the message says why, in a sentence.
    An OperationalError still, for callers that handle a lost database as one."""


def first_line(error: BaseException) -> str:
    """libpq's reason, without the hint lines it adds ("Is the server running on that host…")."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _log_try(what: str):
    def before_sleep(state: RetryCallState) -> None:
        log.warning("waiting_for_postgres", step=what, attempt=state.attempt_number,
                    retry_in_s=round(state.next_action.sleep, 2),
                    error=first_line(state.outcome.exception()))
    return before_sleep


def _give_up(what: str, wait_s: float):
    def give_up(state: RetryCallState) -> NoReturn:
        error = state.outcome.exception()
        tried = "once" if state.attempt_number == 1 else f"{state.attempt_number} times"
        raise DatabaseUnreachable(
            f"could not connect to Postgres to {what} (tried {tried} in {wait_s:g} s, "
            f"TICKWORK_DATABASE_WAIT_S): {first_line(error)}") from error
    return give_up


def _arguments(what: str, wait_s: float) -> dict:
    return {"retry": retry_if_exception_type(psycopg.OperationalError),
            "wait": wait_exponential(multiplier=0.2, max=3),
            "stop": stop_after_delay(wait_s),
            "before_sleep": _log_try(what),
            "retry_error_callback": _give_up(what, wait_s)}


def start_up_tries(what: str, wait_s: float) -> Retrying:
    """Tries of a blocking connection attempt: ``for attempt in start_up_tries(...): with
    attempt: ...``. ``what`` completes "could not connect to Postgres to …"."""
    return Retrying(**_arguments(what, wait_s))


def async_start_up_tries(what: str, wait_s: float) -> AsyncRetrying:
    """start_up_tries for a coroutine (``async for attempt in …``)."""
    return AsyncRetrying(**_arguments(what, wait_s))
