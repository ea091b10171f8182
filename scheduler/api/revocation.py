"""Open journal tails end within about a second of their token's revocation or expiry.

A request is refused as soon as its token is (nothing is cached), but a tail opened before
that would otherwise follow the run for as long as it lasts. One watcher per API process
asks the database, once a second and only while tails are open, which of the tokens behind
open tails have ended (one query for all of them), and ends those tails."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager, suppress
from typing import AsyncIterator
from uuid import UUID

import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES

log = structlog.get_logger()


class RevocationWatch:
    def __init__(self, pool: AsyncConnectionPool, *, interval_seconds: float = 1.0) -> None:
        self._pool, self._interval = pool, interval_seconds
        self._watched: dict[UUID, set[asyncio.Event]] = {}
        self._task: asyncio.Task | None = None

    @asynccontextmanager
    async def watch(self, token_id: UUID) -> AsyncIterator[asyncio.Event]:
        """An event set when ``token_id`` is revoked or expires, for as long as the block runs."""
        ended = asyncio.Event()
        self._watched.setdefault(token_id, set()).add(ended)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll())
        try:
            yield ended
        finally:
            waiting = self._watched.get(token_id)
            if waiting is not None:
                waiting.discard(ended)
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
                for ended in self._watched.pop(row["id"], ()):
                    ended.set()


async def until_ended(body: AsyncIterator[bytes], ended: asyncio.Event) -> AsyncIterator[bytes]:
    """``body``'s chunks until it ends or ``ended`` is set, whichever comes first."""
    stop = asyncio.ensure_future(ended.wait())
    chunks = body.__aiter__()
    following: asyncio.Future | None = None
    try:
        while True:
            following = asyncio.ensure_future(chunks.__anext__())
            await asyncio.wait({following, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                return  # the token ended: the finally below stops the body
            try:
                chunk = following.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        stop.cancel()
        if following is not None and not following.done():
            following.cancel()
            with suppress(asyncio.CancelledError, StopAsyncIteration):
                await following
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
