"""Finishing many runs in one statement: the worker's runs end together far more often than
one at a time, and each statement is a commit (a WAL flush). A run hands its last events and
verdict to the process's finisher and waits; the finisher writes whatever has gathered (up to
a batch; runs that end while a write is in flight gather for the next one) with finish_runs
and tells each run whether it finished or was fenced by the sweep. A run that ends alone (a
cancellation at shutdown) writes through the same statement."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from sql import QUERIES
from sql.db import reconnecting


@dataclass
class Finish:
    execution_id: UUID
    run_token: UUID
    status: str
    outcome: str | None
    reason: str | None
    events: list[Any]  # PendingEvent
    done: asyncio.Future | None = None  # None when the run writes its end itself
    usage: dict[str, int] | None = None  # the run's whole usage; None leaves the column as is


@reconnecting
async def write_finishes(pool: AsyncConnectionPool, batch: list[Finish]) -> set[UUID]:
    """One finish_runs statement for the batch; the ids of the runs that finished (any other
    was fenced by the sweep). Retried while Postgres restarts: the events are idempotent and
    the fence refuses a second verdict."""
    events = [(item.execution_id, e) for item in batch for e in item.events]
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["finish_runs"], {
            "ids": [i.execution_id for i in batch], "tokens": [i.run_token for i in batch],
            "statuses": [i.status for i in batch], "outcomes": [i.outcome for i in batch],
            "reasons": [i.reason for i in batch],
            "usages": [None if i.usage is None else Jsonb(i.usage) for i in batch],
            "event_ids": [run for run, _ in events], "seqs": [e.seq for _, e in events],
            "parent_seqs": [e.parent_seq for _, e in events],
            "types": [e.type for _, e in events],
            "payloads": [Jsonb(e.payload) for _, e in events]})
        return {row["id"] for row in await cursor.fetchall()}


class Finisher:
    def __init__(self, pool: AsyncConnectionPool, *, max_batch: int = 64,
                 linger_seconds: float = 0.0) -> None:
        self._pool, self._max, self._linger = pool, max_batch, linger_seconds
        self._queue: list[Finish] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def finish(self, execution_id: UUID, run_token: UUID, *, status: str,
                     outcome: str | None, reason: str | None, events: list[Any],
                     usage: dict[str, int] | None = None) -> bool:
        """Queue a run's end; True once it is committed, False if the run was fenced."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        done = asyncio.get_running_loop().create_future()
        self._queue.append(Finish(execution_id, run_token, status, outcome, reason, events, done,
                                  usage))
        self._wake.set()
        return await done

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            if len(self._queue) < self._max:
                # Yield once (or linger) so runs ending together gather; while a write is in
                # flight the next batch gathers by itself, as a group commit does.
                await asyncio.sleep(self._linger)
            batch, self._queue = self._queue[: self._max], self._queue[self._max:]
            if not self._queue:
                self._wake.clear()
            try:
                finished = await write_finishes(self._pool, batch)
            except Exception as exc:  # every waiter learns what went wrong
                for item in batch:
                    if not item.done.done():
                        item.done.set_exception(exc)
                continue
            for item in batch:
                if not item.done.done():
                    item.done.set_result(item.execution_id in finished)
