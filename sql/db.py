"""Connections: settings, the one pool per process, and psycopg errors translated once."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import set_json_loads
from psycopg.rows import dict_row
import structlog
from psycopg_pool import AsyncConnectionPool
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, InvalidInput, TickworkError
from tickwork.sql.pool import Pool, hung_up, once_more  # noqa: F401 (importable here as before)
from tickwork.sql.start_up import async_start_up_tries, start_up_tries

log = structlog.get_logger()


class DatabaseSettings(BaseSettings):
    """Where Postgres is. Empty URL means "start the embedded server" (``tickwork up``)."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    database_url: str = ""
    # A direct connection to Postgres for what needs a session of its own: LISTEN (the
    # workers', the API's tails', the webhook deliverer's wake-ups) and the worker's presence
    # lock. Empty: the main URL. Set it when the main URL is a pooler in transaction mode
    # (PgBouncer), which neither delivers notifications nor keeps session locks.
    listen_database_url: str = ""
    # Every long-running process (API, scheduler, worker) opens its one pool with these.
    pool_min_size: int = 1
    pool_max_size: int = 10
    # The hot statements (HOT_PATH) are prepared once per connection. Set false behind a
    # connection pooler in transaction mode that does not track prepared statements (PgBouncer
    # before 1.21, or one with max_prepared_statements = 0): then nothing is prepared.
    prepared_statements: bool = True
    # How long a starting process waits for Postgres to accept it (sql/start_up.py), logging
    # each failed try, before it exits with the reason. 0: one try.
    database_wait_s: float = Field(60.0, ge=0, le=86_400, allow_inf_nan=False)

    @model_validator(mode="after")
    def _sizes_fit(self) -> "DatabaseSettings":
        if self.pool_max_size < 1 or not 0 <= self.pool_min_size <= self.pool_max_size:
            raise ValueError(
                f"pool sizes must satisfy 0 <= pool_min_size <= pool_max_size and "
                f"pool_max_size >= 1 (got {self.pool_min_size} and {self.pool_max_size})")
        return self

    def listen_url(self, main_url: str) -> str:
        """Where a process LISTENs and holds session locks: the direct URL, else the main one."""
        return self.listen_database_url or main_url


# jsonb read with orjson (a claimed run's input is parsed for every run: the standard library's
# loads was 5 % of a worker's CPU at 5,000 runs in flight), but never where orjson would read
# differently: it turns an integer past 64 bits into a float, so text holding 19 digits in a
# row, or that orjson refuses (1e400, which jsonb can hold), is read by the standard library.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def load_json(data: bytes | str) -> Any:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


set_json_loads(load_json)


# Executed with HOT_PATH (``conn.execute(query, params, **HOT_PATH)``): the statements every run
# repeats (the claim, the journal's batches, the wake-ups), prepared on their first use on a
# connection so Postgres parses and plans each once, not once per run (measured: planning was
# a third of their time, 18 % of the worker's backend CPU per run). They name their result
# columns, so a migration adding a column cannot change a prepared statement's result type.
# Nothing else is ever prepared: psycopg's count of executions never reaches NEVER_BY_COUNT.
HOT_PATH = {"prepare": True}
NEVER_BY_COUNT = 2**31


def connect_kwargs(application_name: str, *, prepared_statements: bool = True) -> dict[str, Any]:
    # prepare_threshold=None (prepared_statements off): no server-side prepared statements at
    # all, not even HOT_PATH's, for a pooler in transaction mode that does not track them.
    # autocommit: a transaction exists only inside an explicit ``conn.transaction()`` block, so
    # none is left open by a stray read. application_name lets operators (and tests) find our
    # sessions.
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "prepare_threshold": NEVER_BY_COUNT if prepared_statements else None,
        "application_name": application_name,
    }


# How long one try waits for the pool's first min_size connections, once one of our own worked.
POOL_FILL_WAIT_S = 10.0


async def open_pool(url: str, *, application_name: str, min_size: int = 1,
                    max_size: int = 10, check: bool = False) -> Pool:
    """Open the process's pool once Postgres accepts a connection (waiting for it as a
    starting process does, sql/start_up.py), and wait until min_size connections work. Every
    checkout replaces a connection the server has hung up on, and every statement checks again
    before it is sent (sql/pool.py), for free; ``check`` adds psycopg_pool's round-trip test on
    top (not needed by our processes)."""
    settings = DatabaseSettings()
    kwargs = connect_kwargs(application_name, prepared_statements=settings.prepared_statements)
    async for attempt in async_start_up_tries("open the connection pool",
                                              settings.database_wait_s):
        with attempt:
            # One connection of our own first: it fails at once with the server's reason,
            # where a pool that cannot fill says only that it timed out.
            await (await psycopg.AsyncConnection.connect(url, **kwargs)).close()
            # A pool that timed out is closed for good (psycopg_pool), so each try has its own.
            pool = Pool(url, min_size=min_size, max_size=max_size, open=False, kwargs=kwargs,
                        check=AsyncConnectionPool.check_connection if check else None)
            try:
                await pool.open(wait=True, timeout=POOL_FILL_WAIT_S)
            except BaseException:
                await pool.close()
                raise
            return pool
    raise AssertionError("unreachable: the tries end in a pool or DatabaseUnreachable")


def connect_when_up(url: str, what: str, **kwargs: Any) -> psycopg.Connection:
    """A blocking connection for a starting process's first step (migrations, the tool
    catalog), waiting for Postgres as open_pool does. ``what`` completes "could not connect
    to Postgres to …"."""
    for attempt in start_up_tries(what, DatabaseSettings().database_wait_s):
        with attempt:
            return psycopg.connect(url, **kwargs)
    raise AssertionError("unreachable: the tries end in a connection or DatabaseUnreachable")


def pool_sizes(settings: DatabaseSettings) -> dict[str, int]:
    """open_pool's size arguments from the operator's settings (TICKWORK_POOL_*_SIZE)."""
    return {"min_size": settings.pool_min_size, "max_size": settings.pool_max_size}


def reconnecting(function):
    """A leaf retry for one statement while Postgres restarts: keep trying for up to 60 s.
    Only for statements that are safe to repeat (idempotent, or fenced)."""
    return retry(retry=retry_if_exception_type(psycopg.OperationalError),
                 wait=wait_exponential(multiplier=0.2, max=3), stop=stop_after_delay(60),
                 reraise=True)(function)


async def connect(url: str, *, application_name: str) -> psycopg.AsyncConnection:
    """One connection outside the pool (LISTEN, tests)."""
    return await psycopg.AsyncConnection.connect(
        url, **connect_kwargs(application_name, prepared_statements=False))


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


async def execute_as_tenant(conn: psycopg.AsyncConnection, tenant_id: Any, query: str,
                            params: dict[str, Any]) -> psycopg.AsyncClientCursor:
    """One statement of a tenant's, on an idle connection, in a single message: the tenant's
    row-level security key (set_tenant_scope) and the statement sent together as one simple
    query, which Postgres runs as one implicit transaction (no BEGIN, no COMMIT, one round
    trip, the key still transaction-local). The parameters are bound by psycopg on this side (a
    client cursor), the only way to send two statements with parameters in one message. The
    cursor is returned on the statement's result."""
    cursor = psycopg.AsyncClientCursor(conn)
    scope = QUERIES["set_tenant_scope"].rstrip().rstrip(";")
    await cursor.execute(f"{scope};\n{query}", {**params, "tenant_id": tenant_id})
    cursor.nextset()  # past set_config's row
    return cursor


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


class PerStatement:
    """Connection-like, for code that does slow work between single statements (a tool, which
    may wait on a vendor or a child process): each ``execute`` takes a pooled connection for
    that statement alone and returns its rows already read, so none is held in between. No
    transaction spans two statements here; code that needs one takes ``pool`` itself."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def execute(self, query: Any, params: Any = None) -> "ReadRows":
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query, params)
            rows = await cursor.fetchall() if cursor.description is not None else []
            return ReadRows(rows, cursor.rowcount)


class ReadRows:
    """A finished statement's rows, read like a cursor's."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows, self.rowcount = rows, rowcount

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows


async def listen_forever(url: str, listen_query: str, *, application_name: str,
                         wake: asyncio.Event, stop: asyncio.Event, lost_event: str,
                         on_connect: Callable[[psycopg.AsyncConnection], Awaitable[None]]
                         | None = None) -> None:
    """LISTEN on a direct connection and set ``wake`` at every notification until ``stop``;
    re-establish it after any error (with a capped backoff). A notification only shortens a
    wait: the caller polls anyway, so a lost listener delays work and never loses it.
    ``on_connect`` runs on each new connection first (a worker takes its presence lock there:
    sql/presence.py). Once ``stop`` is set the connection is kept until the caller cancels
    this, but not re-established."""
    delay = 0.5
    while not stop.is_set():
        try:
            conn = await connect(url, application_name=application_name)
            async with conn:
                if on_connect is not None:
                    await on_connect(conn)
                await conn.execute(listen_query)
                delay = 0.5
                async for _ in conn.notifies():
                    wake.set()
        except (psycopg.Error, OSError) as exc:
            log.warning(lost_event, error=type(exc).__name__, retry_in=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
