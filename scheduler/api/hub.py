"""One LISTEN connection per API process, fanned out in memory to every tail.

The hub keeps a feed per run that somebody is tailing: the events after what it already
holds are read once per notification (not once per subscriber) and kept in a bounded buffer
that every subscriber of that run reads from at its own pace. A subscriber that falls behind
the buffer, or a gap of any kind, is filled from the table, so a slow subscriber slows nobody
and nothing is skipped. LISTEN is a hint; every feed is also re-read once per poll interval,
and after the listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.db import connect
from tickwork.sql.journal import events_after
from tickwork.sql.notify import parse_run_ids
from tickwork.scheduler.runs import ended_without_terminal_event
from tickwork.scheduler.serialize import EVENT_FIELDS, pick

log = structlog.get_logger()
BUFFER_EVENTS = 2000


def frame(event: dict[str, Any]) -> bytes:
    """One SSE event. ensure_ascii keeps the data one line of plain ASCII whatever the text
    holds (newlines, NUL, lone surrogates, lines that look like SSE fields)."""
    data = json.dumps(pick(event, EVENT_FIELDS), ensure_ascii=True, separators=(",", ":"))
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {data}\n\n".encode("ascii")


@dataclass
class Feed:
    events: list[dict[str, Any]] = field(default_factory=list)  # contiguous, by seq
    last_seq: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    subscribers: int = 0
    ended: bool = False  # the run ended without a terminal event (cancelled before it started)
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)  # one read per run at a time

    def after(self, seq: int) -> list[dict[str, Any]] | None:
        """Buffered events after ``seq``, or None when the buffer does not reach back there."""
        if seq >= self.last_seq:
            return []
        if not self.events or self.events[0]["seq"] > seq + 1:
            return None
        return self.events[seq + 1 - self.events[0]["seq"]:]


class EventHub:
    def __init__(self, pool: AsyncConnectionPool, url: str, *, poll_seconds: float = 1.0) -> None:
        self._pool, self._url, self._poll = pool, url, poll_seconds
        self._feeds: dict[UUID, Feed] = {}
        self._tasks: list[asyncio.Task] = []

    @property
    def subscribers(self) -> int:
        return sum(feed.subscribers for feed in self._feeds.values())

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._poll_all())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: UUID, after: int):
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = Feed(last_seq=after)
        feed.subscribers += 1
        try:
            yield feed
        finally:
            feed.subscribers -= 1
            if feed.subscribers == 0:
                self._feeds.pop(run_id, None)

    async def refresh(self, run_id: UUID, *, notified: bool = False) -> None:
        """Read what is new for one run, once, and wake its subscribers when there is news
        (a notification always counts: the run may have ended without an event)."""
        feed = self._feeds.get(run_id)
        if feed is None:
            return
        async with feed.reading:  # a poll and a notification must not both append
            async with self._pool.connection() as conn:
                rows = await events_after(conn, run_id, feed.last_seq, limit=BUFFER_EVENTS)
                if notified and not rows:
                    feed.ended = await ended_without_terminal_event(conn, run_id)
            rows = [row for row in rows if row["seq"] > feed.last_seq]
            for row in rows:
                row["frame"] = frame(row)  # encoded once, for every subscriber
            if rows:
                feed.events = (feed.events + rows)[-BUFFER_EVENTS:]
                feed.last_seq = rows[-1]["seq"]
        if rows or notified:
            feed.changed.set()
            feed.changed = asyncio.Event()

    async def _listen(self) -> None:
        delay = 0.5
        while True:
            try:
                conn = await connect(self._url, application_name="tickwork-api-listen")
                async with conn:
                    await conn.execute(QUERIES["listen_for_events"])
                    delay = 0.5
                    await self._refresh_all()  # catch up on whatever happened while away
                    async for note in conn.notifies():  # one run id, or several
                        for run_id in parse_run_ids(note.payload):
                            await self.refresh(run_id, notified=True)
            except (psycopg.Error, OSError) as exc:
                log.warning("tail_listener_lost", error=type(exc).__name__, retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _poll_all(self) -> None:
        while True:
            await asyncio.sleep(self._poll)
            with contextlib.suppress(psycopg.Error):
                await self._refresh_all()

    async def _refresh_all(self) -> None:
        for run_id in list(self._feeds):
            await self.refresh(run_id)
