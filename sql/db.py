"""Connections: settings, the one pool per process, and psycopg errors translated once."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from sql.errors import Conflict, InvalidInput, TickworkError


class DatabaseSettings(BaseSettings):
    """Where Postgres is. Empty URL means "start the embedded server" (``tickwork up``)."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    database_url: str = ""
    pool_min_size: int = 1
    pool_max_size: int = 10


def connect_kwargs(application_name: str) -> dict[str, Any]:
    # prepare_threshold=None: no server-side prepared statements, so a PgBouncer in transaction
    # mode in front of Postgres is safe. autocommit: a transaction exists only inside an explicit
    # ``conn.transaction()`` block, so none is left open by a stray read. application_name lets
    # operators (and tests) find our sessions.
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "prepare_threshold": None,
        "application_name": application_name,
    }


async def open_pool(url: str, *, application_name: str, min_size: int = 1,
                    max_size: int = 10, check: bool = True) -> AsyncConnectionPool:
    """Open the process's pool and wait until one connection works (retrying while Postgres
    starts). ``check`` tests each connection as it leaves the pool (one round trip); the
    worker turns it off on its hot path, where every statement already copes with a lost
    connection (a broken connection is discarded when it comes back to the pool)."""
    pool = AsyncConnectionPool(url, min_size=min_size, max_size=max_size, open=False,
                               kwargs=connect_kwargs(application_name),
                               check=AsyncConnectionPool.check_connection if check else None)
    await _open_with_retry(pool)
    return pool


@retry(retry=retry_if_exception_type(psycopg.OperationalError),
       wait=wait_exponential(multiplier=0.2, max=2), stop=stop_after_delay(30), reraise=True)
async def _open_with_retry(pool: AsyncConnectionPool) -> None:
    await pool.open(wait=True, timeout=10)


def reconnecting(function):
    """A leaf retry for one statement while Postgres restarts: keep trying for up to 60 s.
    Only for statements that are safe to repeat (idempotent, or fenced)."""
    return retry(retry=retry_if_exception_type(psycopg.OperationalError),
                 wait=wait_exponential(multiplier=0.2, max=3), stop=stop_after_delay(60),
                 reraise=True)(function)


async def connect(url: str, *, application_name: str) -> psycopg.AsyncConnection:
    """One connection outside the pool (LISTEN, tests)."""
    return await psycopg.AsyncConnection.connect(url, **connect_kwargs(application_name))


# Constraint name -> the error a person should read. One table, used by every caller.
_CONSTRAINT_ERRORS: dict[str, tuple[type[TickworkError], str, str]] = {
    "agents_tenant_name_key": (Conflict, "agent_name_taken",
                               "an agent with this name already exists; pick another name or update it"),
    "agents_instructions_length": (InvalidInput, "instructions_too_long",
                                   "instructions are limited to 16,384 characters"),
    "schedules_timeout_range": (InvalidInput, "invalid_timeout",
                                "timeout_minutes must be a whole number from 1 to 15"),
    "schedules_agent_id_fkey": (InvalidInput, "unknown_agent", "the agent does not exist"),
    "executions_terminal_is_final": (Conflict, "execution_finished",
                                     "the execution has already finished; its state cannot change"),
}


def translate_error(exc: psycopg.Error) -> TickworkError | None:
    """Map a constraint violation to a TickworkError; None when it is not ours to explain."""
    diag = getattr(exc, "diag", None)
    name = diag.constraint_name if diag is not None else None
    if name in _CONSTRAINT_ERRORS:
        kind, code, message = _CONSTRAINT_ERRORS[name]
        if kind is InvalidInput:
            return InvalidInput(message, code=code)
        error = kind(message)
        error.code = code
        return error
    if isinstance(exc, pg_errors.CheckViolation):
        return InvalidInput(f"the database refused the value ({name or 'check'})", code="invalid_input")
    return None
