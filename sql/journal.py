"""The run journal's writer and reader.

A run has one writer at a time (the worker holding its run token), which numbers events
itself: seq 1 is run_start (written with the claim), and every later event takes the next
number. Events are buffered and appended in small batches, each batch one statement that first
takes a share lock on the running execution: an append after the sweep's verdict finds
nothing to lock and writes nothing (the run is fenced), and the sweep's terminal event,
numbered max(seq) + 1 under its own row lock, always comes last. One NOTIFY per batch wakes
tails; nothing ever waits on a subscriber.

Visible as it happens: an emitted event does not wait for the run's next explicit flush (a
turn can be a long model call or a slow tool). The first emit into an idle buffer starts a
background flush that lingers a moment (so the events of one burst share one statement),
writes everything buffered, and goes round again while more arrived meanwhile. One write at a
time per run (a lock), so batches land in seq order; a fence found in the background is kept
and raised at the run's next flush, finish, suspend or release, which also write whatever is
still buffered. A pooled connection is taken only for the statement itself.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Callable
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES, failpoints
from tickwork.sql.db import reconnecting
from tickwork.sql.finisher import Finish, Finisher, event_rows, write_finishes
from tickwork.sql.lifecycle import release_run
from tickwork.sql.vocabulary import EventType, FinalStatus, Outcome, check_event_type

# Emission -> background flush. Well inside the 250 ms promise (DESIGN "Visible as it
# happens"), long enough that a burst (step_start, content_delta, tool_start ...) is one append.
LINGER_SECONDS = 0.05


class RunFenced(Exception):
    """The run is no longer ours to write: the sweep judged it, or it finished elsewhere."""


@dataclass
class PendingEvent:
    seq: int
    parent_seq: int | None
    type: str
    payload: dict[str, Any]


class RunJournal:
    def __init__(self, pool: AsyncConnectionPool, execution_id: UUID, run_token: UUID, *,
                 next_seq: int, redact: Callable[[Any], Any],
                 linger_seconds: float | None = LINGER_SECONDS) -> None:
        self._pool, self.execution_id, self.run_token = pool, execution_id, run_token
        self._next_seq, self._redact = next_seq, redact
        self._pending: list[PendingEvent] = []
        self.cancel_requested = False  # learned with every append
        self._linger = linger_seconds  # None: no background flush (explicit flushes only)
        self._lock = asyncio.Lock()  # one write at a time: batches land in seq order
        self._timer: asyncio.TimerHandle | None = None  # the linger before a background flush
        self._background: asyncio.Task | None = None
        self._fenced = False  # found by a background flush; raised at the run's next write

    def emit(self, type: EventType, payload: dict[str, Any], parent: int | None = None) -> int:
        """Buffer an event (secrets redacted before it is ever stored) and make sure a flush
        is coming within the linger; return its seq."""
        check_event_type(type)  # a typo fails here, not as a CHECK that drops the batch
        seq = self._next_seq
        self._next_seq += 1
        self._pending.append(PendingEvent(seq, parent, type, self._redact(payload)))
        self._flush_soon()
        return seq

    async def flush(self) -> None:
        """Append the buffered events (one statement); raise RunFenced if the run is no longer
        ours. Also learns whether a person asked the run to stop."""
        async with self._lock:
            await self._write()

    def _flush_soon(self) -> None:
        if self._linger is None or self._fenced or self._timer is not None:
            return
        if self._background is not None and not self._background.done():
            return  # the running one goes round again for this event
        try:
            # A timer, not a task: most short runs end (and write everything) within the
            # linger, and cancelling a timer costs far less than creating and cancelling a task.
            self._timer = asyncio.get_running_loop().call_later(self._linger, self._linger_over)
        except RuntimeError:  # no event loop (a pure unit test): explicit flushes write
            pass

    def _linger_over(self) -> None:
        self._timer = None
        if self._pending and not self._fenced:  # an explicit flush may have written them
            self._background = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        """The background flush, once the linger is over: write everything buffered, and
        linger and write again while events keep coming. A fence is remembered for the run;
        any other error leaves the events buffered for the run's own next flush, which
        retries and reports it."""
        while self._pending and not self._fenced:
            try:
                async with self._lock:
                    await self._write()
            except RunFenced:
                return
            except Exception:  # Postgres away past the reconnect budget
                return
            if self._pending:
                await asyncio.sleep(self._linger)

    async def background_idle(self) -> None:
        """Wait until no background flush is lingering or writing (tests use it to let one
        land; a run's own writes never need it)."""
        while self._timer is not None or (self._background is not None
                                          and not self._background.done()):
            if self._background is not None and not self._background.done():
                await asyncio.gather(self._background, return_exceptions=True)
            else:
                await asyncio.sleep(self._linger or 0)

    def _stop_background(self) -> None:
        """Called under the lock by the run's last write: nothing is left for it to do."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._background is not None and not self._background.done():
            self._background.cancel()

    def _raise_if_fenced(self) -> None:
        if self._fenced:
            self._pending = []
            raise RunFenced(f"execution {self.execution_id} is no longer running")

    @reconnecting
    async def _write(self) -> None:
        """One append of everything buffered now (the caller holds the lock). Events emitted
        while it is in flight stay buffered for the next one."""
        self._raise_if_fenced()
        if not self._pending:
            return
        batch = list(self._pending)
        async with self._pool.connection() as conn:
            row = await self._append(conn, batch)
        if not row["running"]:
            self._fenced = True
            self._raise_if_fenced()
        self.cancel_requested = bool(row["cancel_requested"])
        del self._pending[:len(batch)]

    async def finish(self, *, status: FinalStatus, outcome: Outcome | None,
                     reason: str | None = None, finisher: "Finisher | None" = None,
                     usage: dict[str, int] | None = None) -> None:
        """Append what is buffered (the terminal event included) and record the verdict
        together (through the process's finisher, batched with other runs, when given); raise
        RunFenced if the sweep got there first. usage is the run's whole total
        ({"input_tokens", "output_tokens", "model_calls"}); None leaves the stored usage."""
        await failpoints.hit("run.before_complete_commit")
        async with self._lock:
            self._stop_background()
            self._raise_if_fenced()
            if finisher is None:
                return await self._finish_alone(status, outcome, reason, usage)
            events, self._pending = self._pending, []
            if not await finisher.finish(self.execution_id, self.run_token, status=status,
                                         outcome=outcome, reason=reason, events=events,
                                         usage=usage):
                raise RunFenced(f"execution {self.execution_id} is no longer running")

    async def _finish_alone(self, status: str, outcome: str | None, reason: str | None,
                            usage: dict[str, int] | None) -> None:
        item = Finish(self.execution_id, self.run_token, status, outcome, reason, self._pending,
                      usage=usage)
        finished = await write_finishes(self._pool, [item])
        self._pending = []
        if self.execution_id not in finished:
            raise RunFenced(f"execution {self.execution_id} is no longer running")

    async def suspend(self, *, state: dict[str, Any], version: int, approval_id: str,
                      tool_call_id: str, tool: str, arguments: dict[str, Any],
                      usage: dict[str, int] | None = None) -> None:
        """Save the run's state, create its approval and end the execution as suspended
        (completed, breadcrumb 'suspended', no terminal event), in one transaction. usage is
        the run's total so far; None leaves the stored usage."""
        async with self._lock:
            self._stop_background()
            self._raise_if_fenced()
            await self._suspend(state=state, version=version, approval_id=approval_id,
                                tool_call_id=tool_call_id, tool=tool, arguments=arguments,
                                usage=usage)

    @reconnecting
    async def _suspend(self, *, state: dict[str, Any], version: int, approval_id: str,
                       tool_call_id: str, tool: str, arguments: dict[str, Any],
                       usage: dict[str, int] | None) -> None:
        async with self._pool.connection() as conn:
            async with conn.transaction():
                cursor = await conn.execute(QUERIES["lock_running_execution"], {
                    "execution_id": self.execution_id, "run_token": self.run_token})
                if await cursor.fetchone() is None:
                    self._pending = []
                    raise RunFenced(f"execution {self.execution_id} is no longer running")
                await self._append(conn, self._pending)
                await failpoints.hit("approval.after_pause_before_state_commit")
                cursor = await conn.execute(QUERIES["update_execution_suspended"], {
                    "execution_id": self.execution_id, "run_token": self.run_token,
                    "version": version, "state": Jsonb(state), "approval_id": approval_id,
                    "tool_call_id": tool_call_id, "tool": tool, "arguments": Jsonb(arguments),
                    "usage": None if usage is None else Jsonb(usage)})
                if await cursor.fetchone() is None:
                    raise RunFenced(f"execution {self.execution_id} is no longer running")
        self._pending = []

    async def release(self, approval_id: str | None = None,
                      saved_state: dict[str, Any] | None = None) -> dict[str, Any]:
        """The worker is going away with this run unfinished: write what is buffered and hand
        the run on (sql.lifecycle.release_run) in one transaction; raise RunFenced if it was no
        longer ours. Returns what release_run did."""
        async with self._lock:
            self._stop_background()
            self._raise_if_fenced()
            return await self._release(approval_id, saved_state)

    @reconnecting
    async def _release(self, approval_id: str | None,
                       saved_state: dict[str, Any] | None) -> dict[str, Any]:
        async with self._pool.connection() as conn:
            async with conn.transaction():
                if self._pending:
                    await self._append(conn, self._pending)
                released = await release_run(conn, self.execution_id, self.run_token,
                                             approval_id=approval_id, saved_state=saved_state)
        self._pending = []
        if released is None:
            raise RunFenced(f"execution {self.execution_id} is no longer running")
        return released

    async def _append(self, conn: AsyncConnection, events: list[PendingEvent]) -> dict[str, Any]:
        # The buffer is cleared only after success, so a retry after a lost connection appends
        # the same events again, idempotently.
        cursor = await conn.execute(QUERIES["insert_run_events"], {
            "execution_id": self.execution_id, "run_token": self.run_token,
            "events": json.dumps(event_rows(events))})
        return await cursor.fetchone()


async def events_after(conn: AsyncConnection, execution_id: UUID, after: int,
                       limit: int = 1000) -> list[dict[str, Any]]:
    cursor = await conn.execute(QUERIES["list_run_events"], {
        "execution_id": execution_id, "after": after, "limit": limit})
    return await cursor.fetchall()
