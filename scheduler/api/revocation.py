"""Open journal tails end within about a second of their token's revocation or expiry.

A request is refused as soon as its token is (nothing is cached), but a tail opened before
that would otherwise follow the run for as long as it lasts. One watcher per API process
asks the database, once a second and only while tails are open, which of the tokens behind
open tails have ended (one query for all of them), and ends those tails."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator
from uuid import UUID

import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES

log = structlog.get_logger()


class RevocationWatch:
    def __init__(self, pool: AsyncConnectionPool, *, interval_seconds: float = 1.0) -> None:
        self._pool, self._interval = pool, interval_seconds
        # token id -> (ended, the stream's wake-up or None) of each open tail behind it
        self._watched: dict[UUID, set[tuple[asyncio.Event, asyncio.Event | None]]] = {}
        self._task: asyncio.Task | None = None

    @asynccontextmanager
    async def watch(self, token_id: UUID,
                    wake: asyncio.Event | None = None) -> AsyncIterator[asyncio.Event]:
        """An event set when ``token_id`` is revoked or expires, for as long as the block runs;
        ``wake`` (a stream's own wake-up) is set with it."""
        ended = asyncio.Event()
        entry = (ended, wake)
        self._watched.setdefault(token_id, set()).add(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll())
        try:
            yield ended
        finally:
            waiting = self._watched.get(token_id)
            if waiting is not None:
                waiting.discard(entry)
                if not waiting:
                    del self._watched[token_id]

    async def _poll(self) -> None:
        while self._watched:  # the task ends by itself once no tail is open
            await asyncio.sleep(self._interval)
            try:
                async with self._pool.connection() as conn:
                    rows = await (await conn.execute(QUERIES["list_ended_api_tokens"], {
                        "ids": list(self._watched)})).fetchall()
            except Exception as exc:  # a lost connection: try again at the next interval
                log.warning("token_watch_failed", error=type(exc).__name__)
                continue
            for row in rows:
                for ended, wake in self._watched.pop(row["id"], ()):
                    ended.set()
                    if wake is not None:
                        wake.set()
