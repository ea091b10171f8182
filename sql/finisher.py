"""Finishing many runs in one statement: the worker's runs end together far more often than
one at a time, and each statement is a commit (a WAL flush). A run hands its last events and
verdict to the process's finisher and waits; the finisher writes whatever has gathered (up to
a batch; runs that end while a write is in flight gather for the next one) with finish_runs
and tells each run whether it finished or was fenced by the sweep. A run that ends alone (a
cancellation at shutdown) writes through the same statement."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.db import reconnecting
from tickwork.sql.vocabulary import FinalStatus, Outcome


@dataclass
class Finish:
    execution_id: UUID
    run_token: UUID
    status: FinalStatus
    outcome: Outcome | None
    reason: str | None
    events: list[Any]  # PendingEvent
    done: asyncio.Future | None = None  # None when the run writes its end itself
    usage: dict[str, int] | None = None  # the run's whole usage; None leaves the column as is


@reconnecting
async def write_finishes(pool: AsyncConnectionPool, batch: list[Finish]) -> set[UUID]:
    """One finish_runs statement for the batch; the ids of the runs that finished (any other
    was fenced by the sweep). Retried while Postgres restarts: the events are idempotent and
    the fence refuses a second verdict."""
    runs = json.dumps([{"id": str(i.execution_id), "run_token": str(i.run_token),
                        "status": i.status, "outcome": i.outcome, "reason": i.reason,
                        "usage": i.usage, "events": event_rows(i.events)} for i in batch])
    async with pool.connection() as conn:
        cursor = await conn.execute(QUERIES["update_executions_finished"], {"runs": runs})
        return {row["id"] for row in await cursor.fetchall()}


def event_rows(events: list[Any]) -> list[dict[str, Any]]:
    """Buffered events (PendingEvent) as the objects the journal's statements read with
    jsonb_to_recordset. The whole batch goes as one json.dumps: dumping a typed array per
    column, element by element, was the largest share of the worker's CPU per run."""
    return [{"seq": e.seq, "parent_seq": e.parent_seq, "type": e.type, "payload": e.payload}
            for e in events]


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
