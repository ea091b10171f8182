"""The run journal's writer and reader.

A run has one writer at a time (the worker holding its run token), which numbers events
itself: seq 1 is run_start (written with the claim), and every later event takes the next
number. Events are buffered and appended in small batches, each batch one statement that first
takes a share lock on the running execution: an append after the sweep's verdict finds
nothing to lock and writes nothing (the run is fenced), and the sweep's terminal event,
numbered max(seq) + 1 under its own row lock, always comes last. One NOTIFY per batch wakes
tails; nothing ever waits on a subscriber.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from sql import QUERIES, failpoints
from sql.db import reconnecting
from sql.finisher import Finish, Finisher, write_finishes


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
                 next_seq: int, redact: Callable[[Any], Any]) -> None:
        self._pool, self.execution_id, self.run_token = pool, execution_id, run_token
        self._next_seq, self._redact = next_seq, redact
        self._pending: list[PendingEvent] = []
        self.cancel_requested = False  # learned with every append

    def emit(self, type: str, payload: dict[str, Any], parent: int | None = None) -> int:
        """Buffer an event (secrets redacted before it is ever stored); return its seq."""
        seq = self._next_seq
        self._next_seq += 1
        self._pending.append(PendingEvent(seq, parent, type, self._redact(payload)))
        return seq

    @reconnecting
    async def flush(self) -> None:
        """Append the buffered events (one statement); raise RunFenced if the run is no longer
        ours. Also learns whether a person asked the run to stop."""
        if not self._pending:
            return
        async with self._pool.connection() as conn:
            row = await self._append(conn)
        if not row["running"]:
            self._pending = []
            raise RunFenced(f"execution {self.execution_id} is no longer running")
        self.cancel_requested = bool(row["cancel_requested"])
        self._pending = []

    async def finish(self, *, status: str, outcome: str | None, reason: str | None = None,
                     finisher: "Finisher | None" = None,
                     usage: dict[str, int] | None = None) -> None:
        """Append what is buffered (the terminal event included) and record the verdict
        together (through the process's finisher, batched with other runs, when given); raise
        RunFenced if the sweep got there first. usage is the run's whole total
        ({"input_tokens", "output_tokens", "model_calls"}); None leaves the stored usage."""
        await failpoints.hit("run.before_complete_commit")
        if finisher is None:
            return await self._finish_alone(status, outcome, reason, usage)
        events, self._pending = self._pending, []
        if not await finisher.finish(self.execution_id, self.run_token, status=status,
                                     outcome=outcome, reason=reason, events=events, usage=usage):
            raise RunFenced(f"execution {self.execution_id} is no longer running")

    async def _finish_alone(self, status: str, outcome: str | None, reason: str | None,
                            usage: dict[str, int] | None) -> None:
        item = Finish(self.execution_id, self.run_token, status, outcome, reason, self._pending,
                      usage=usage)
        finished = await write_finishes(self._pool, [item])
        self._pending = []
        if self.execution_id not in finished:
            raise RunFenced(f"execution {self.execution_id} is no longer running")

    @reconnecting
    async def suspend(self, *, state: dict[str, Any], version: int, approval_id: str,
                      tool_call_id: str, tool: str, arguments: dict[str, Any],
                      usage: dict[str, int] | None = None) -> None:
        """Save the run's state, create its approval and end the execution as suspended
        (completed, breadcrumb 'suspended', no terminal event), in one transaction. usage is
        the run's total so far; None leaves the stored usage."""
        async with self._pool.connection() as conn:
            async with conn.transaction():
                cursor = await conn.execute(QUERIES["lock_running_execution"], {
                    "execution_id": self.execution_id, "run_token": self.run_token})
                if await cursor.fetchone() is None:
                    self._pending = []
                    raise RunFenced(f"execution {self.execution_id} is no longer running")
                await self._append(conn)
                await failpoints.hit("approval.after_pause_before_state_commit")
                cursor = await conn.execute(QUERIES["suspend_for_approval"], {
                    "execution_id": self.execution_id, "run_token": self.run_token,
                    "version": version, "state": Jsonb(state), "approval_id": approval_id,
                    "tool_call_id": tool_call_id, "tool": tool, "arguments": Jsonb(arguments),
                    "usage": None if usage is None else Jsonb(usage)})
                if await cursor.fetchone() is None:
                    raise RunFenced(f"execution {self.execution_id} is no longer running")
        self._pending = []

    async def _append(self, conn: AsyncConnection) -> dict[str, Any]:
        # The buffer is cleared only after success, so a retry after a lost connection appends
        # the same events again, idempotently.
        cursor = await conn.execute(QUERIES["append_run_events"],
                                    {**self._batch(), "run_token": self.run_token})
        return await cursor.fetchone()

    def _batch(self) -> dict[str, Any]:
        events = self._pending
        return {"execution_id": self.execution_id, "seqs": [e.seq for e in events],
                "parent_seqs": [e.parent_seq for e in events], "types": [e.type for e in events],
                "payloads": [Jsonb(e.payload) for e in events]}


async def events_after(conn: AsyncConnection, execution_id: UUID, after: int,
                       limit: int = 1000) -> list[dict[str, Any]]:
    cursor = await conn.execute(QUERIES["list_run_events"], {
        "execution_id": execution_id, "after": after, "limit": limit})
    return await cursor.fetchall()
