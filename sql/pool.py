"""The process's pool, and what a database restart may cost a statement: nothing, when it can be
known that the statement never reached the server, or when it is safe to repeat.

A Postgres restart (or pg_terminate_backend) ends every session: the server says goodbye (a
FATAL message) and hangs up. Two checks see it, neither a round trip:

* at checkout, a pooled connection whose socket has anything to read while it sits idle is
  replaced before anyone uses it (Pool.getconn: one poll() call);
* right before a statement starts on an idle connection (an autocommit statement, or the BEGIN
  of a transaction), the connection is checked again, exactly (what the server sent is read):
  one that is gone raises LostBeforeStatement without sending anything (PooledConnection.wait).
  That statement never reached the server, so it cannot have done anything.

once_more() runs an operation once more, on fresh connections, when it failed with
LostBeforeStatement before sending any statement of its own (a tick that has done nothing yet,
a worker's claim, any request), or when it is safe to repeat whatever happened (a read, a
keyed run start) and its connection was lost at any point. A statement lost after it was sent
may have committed: nothing here retries it for an operation that is not safe to repeat.
The fresh connection may be lost too (a restart's goodbyes reach the pool's sessions some
milliseconds apart, and a busy machine widens the gap): each attempt is judged on its own, up to
ATTEMPTS in all.
"""

from __future__ import annotations

import select
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import structlog
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from tickwork.sql import failpoints

log = structlog.get_logger()
T = TypeVar("T")


class LostBeforeStatement(psycopg.OperationalError):
    """The server had closed the connection before this statement was sent; nothing was sent."""


class PooledConnection(psycopg.AsyncConnection):
    """A pooled connection that looks, before each statement starts on it while idle, whether
    the server has hung up (see the module's note). Pooled connections never LISTEN, and an
    idle session is sent nothing else (a reloaded setting reaches it with its next command's
    answer), so what an idle one has to read is the server's goodbye."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.said_goodbye = False  # a FATAL arrived while idle (its hang-up may follow)
        self._ending = False  # in commit() or rollback(): no statement starts there
        self.add_notice_handler(_goodbye_listener(weakref.ref(self)))

    async def commit(self) -> None:
        # Idle (the pool's checkin after autocommit statements), psycopg's commit sends
        # nothing: a connection gone by then must not fail it.
        self._ending = True
        try:
            await super().commit()
        finally:
            self._ending = False

    async def rollback(self) -> None:
        self._ending = True
        try:
            await super().rollback()
        finally:
            self._ending = False

    async def wait(self, gen, *args: Any, **kwargs: Any):
        # Idle: nothing is in flight and no transaction is open, so ``gen`` is the start of a
        # statement (or of a transaction). A connection already broken is left to psycopg,
        # which refuses it itself (and a rollback after a lost statement must not be refused
        # here: that would hide the statement's own error).
        if self.pgconn.transaction_status == TransactionStatus.IDLE and not self._ending:
            if gone(self):
                gen.close()  # never started: nothing of it was sent
                await self.close()  # the pool discards it when it comes back
                _note_lost(before_sending=True)
                raise LostBeforeStatement(
                    "the database closed this connection before the statement was sent (a "
                    "restart?); nothing was sent")
            _note_started()
        try:
            return await super().wait(gen, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if connection_lost(exc):
                _note_lost(before_sending=False)
            raise


def _goodbye_listener(ref: weakref.ref) -> Callable[[Any], None]:
    def note(diag: Any) -> None:
        conn = ref()
        if conn is not None and diag.severity_nonlocalized == "FATAL":
            conn.said_goodbye = True
    return note


def hung_up(conn: psycopg.AsyncConnection) -> bool:
    """At checkout: True when an idle connection is closed or has unread input (the server's
    goodbye: a FATAL message, then the end of the stream)."""
    if conn.closed or conn.broken:
        return True
    return _readable(conn)


def gone(conn: PooledConnection) -> bool:
    """Before a statement: True when the server has closed this idle connection, found by
    reading what it sent: the end of the stream, or its FATAL goodbye (the end may follow it by
    a few milliseconds)."""
    if conn.closed or conn.pgconn.status == ConnStatus.BAD:
        return True
    if not _readable(conn):
        return False
    try:
        for _ in range(2):  # the goodbye, then (often already there) the end of the stream
            conn.pgconn.consume_input()  # reads only: is_busy() parses, and a FATAL said
            conn.pgconn.is_busy()  # while idle reaches the notice handler
            if conn.said_goodbye or not _readable(conn):
                break
    except psycopg.OperationalError:  # the end of the stream: the server hung up
        return True
    return conn.pgconn.status == ConnStatus.BAD or conn.said_goodbye


def _readable(conn: psycopg.AsyncConnection) -> bool:
    poller = select.poll()
    try:
        poller.register(conn.pgconn.socket, select.POLLIN)
    except (psycopg.OperationalError, OSError, ValueError):
        return True
    return bool(poller.poll(0))


class Pool(AsyncConnectionPool):
    """The pool, with a free test at checkout: a pooled connection the server has hung up on
    (a restart, or pg_terminate_backend) is replaced before anyone runs a statement on it; its
    connections check again before each statement (PooledConnection)."""

    replaced_dead = 0  # how many connections the checkout found dead (metrics, tests)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, connection_class=PooledConnection, **kwargs)

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection:
        conn = await super().getconn(timeout)
        for _ in range(self.max_size):  # after a restart every pooled connection may be dead
            if not hung_up(conn):
                break
            self.replaced_dead += 1
            await conn.close()  # a closed connection is discarded and replaced on return
            await self.putconn(conn)
            conn = await super().getconn(timeout)
        await failpoints.hit("db.after_checkout")  # tests: a connection dies right after this
        return conn


# --- once more ---------------------------------------------------------------------------------

@dataclass
class Watch:
    """What an operation's statements met while it ran (its inner operations' too): how many
    started, whether a connection was lost, and whether one was found gone before any had."""

    started: int = 0
    lost: bool = False
    lost_before_any: bool = False
    outer: Watch | None = None

    def worth_once_more(self, repeatable: bool) -> bool:
        """Safe to run the operation again: it sent nothing before its connection was found
        gone, or it may be repeated whatever it did and a connection was lost."""
        return (self.lost_before_any and self.started == 0) or (repeatable and self.lost)


_WATCH: ContextVar[Watch | None] = ContextVar("tickwork_statement_watch", default=None)
retried = {"unsent": 0, "repeatable": 0}  # operations run once more, by why (tests, metrics)
ATTEMPTS = 3  # a restart kills each session once: three attempts outlast its goodbyes


@contextmanager
def watching() -> Iterator[Watch]:
    """Watch the statements run in this context (and the tasks it starts) until the end."""
    watch = Watch(outer=_WATCH.get())
    token = _WATCH.set(watch)
    try:
        yield watch
    finally:
        _WATCH.reset(token)


def _note_started() -> None:
    watch = _WATCH.get()
    while watch is not None:
        watch.started += 1
        watch = watch.outer


def _note_lost(*, before_sending: bool) -> None:
    watch = _WATCH.get()
    while watch is not None:
        watch.lost = True
        if before_sending and watch.started == 0:
            watch.lost_before_any = True
        watch = watch.outer


def connection_lost(exc: BaseException) -> bool:
    """The error says the connection is gone (a restart, a network cut), not that the server
    refused or cancelled the statement (a lock timeout, a cancel: those are not retried)."""
    if isinstance(exc, LostBeforeStatement):
        return True
    if not isinstance(exc, psycopg.OperationalError) or isinstance(
            exc, (PoolTimeout, psycopg.errors.PipelineAborted)):
        return False  # no connection within the timeout; a pipeline after another's error
    state = exc.sqlstate  # None: the client lost the connection (closed, reset, end of file)
    return state is None or state.startswith(("08", "57P"))


def note_retry(watch: Watch, name: str, error: BaseException | str) -> None:
    why = "unsent" if watch.lost_before_any and watch.started == 0 else "repeatable"
    retried[why] += 1
    log.warning("retried_on_fresh_connection", operation=name, why=why,
                error=error if isinstance(error, str) else type(error).__name__)


async def once_more(operation: Callable[[], Awaitable[T]], *, repeatable: bool = False,
                    name: str = "operation") -> T:
    """Run ``operation`` (it takes its own connections from a Pool). If it fails because a
    connection was found gone before a statement was sent, and it had sent no statement
    before that, run it once more; so too after any lost connection when ``repeatable`` (safe
    to run twice whatever the first run did: a read, an idempotent statement). Each attempt is
    judged the same way, up to ATTEMPTS in all. Anything else is raised as it came."""
    for _ in range(ATTEMPTS - 1):
        with watching() as watch:
            try:
                return await operation()
            except psycopg.OperationalError as exc:
                if not (connection_lost(exc) and watch.worth_once_more(repeatable)):
                    raise
                note_retry(watch, name, exc)
    with watching():  # the last attempt: whatever it raises is the operation's
        return await operation()
