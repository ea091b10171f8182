"""One LISTEN connection per API process, fanned out in memory to every tail.

The hub keeps a feed per run that somebody is tailing: the events after what it already
holds are read once per notification (not once per subscriber) and kept in a bounded buffer
that every subscriber of that run reads from at its own pace. A subscriber that falls behind
the buffer, or a gap of any kind, is filled from the table, so a slow subscriber slows nobody
and nothing is skipped. LISTEN is a hint; every feed is also re-read once per poll interval,
and after the listener reconnects.

One statement reads every run a wake-up names (a worker's payload names up to 200), and one
read is in flight at a time: the runs named while it runs go in the next. The hub only sets
each subscriber's wake-up; every stream sends from its own task, so a slow client delays
nobody else, and the listener never waits on a socket.
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
from tickwork.sql.journal import events_after_each
from tickwork.sql.notify import parse_run_ids
from tickwork.scheduler.runs import ended_without_terminal_events
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
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # replaced at every wake
    subscribers: int = 0
    ended: bool = False  # the run ended without a terminal event (cancelled before it started)
    wakers: set[asyncio.Event] = field(default_factory=set)  # each stream's own wake-up

    def after(self, seq: int) -> list[dict[str, Any]] | None:
        """Buffered events after ``seq``, or None when the buffer does not reach back there."""
        if seq >= self.last_seq:
            return []
        if not self.events or self.events[0]["seq"] > seq + 1:
            return None
        return self.events[seq + 1 - self.events[0]["seq"]:]

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()
        for waker in self.wakers:
            waker.set()


class EventHub:
    def __init__(self, pool: AsyncConnectionPool, url: str, *, poll_seconds: float = 1.0) -> None:
        self._pool, self._url, self._poll = pool, url, poll_seconds
        self._feeds: dict[UUID, Feed] = {}
        self._tasks: list[asyncio.Task] = []
        self._reading = asyncio.Lock()  # one read at a time: a poll and a wake-up never both append
        self._named: dict[UUID, None] = {}  # tailed runs a wake-up named, not read yet
        self._reader: asyncio.Task | None = None
        self.reads = 0  # statements that read events (tests count the batching with it)

    @property
    def subscribers(self) -> int:
        return sum(feed.subscribers for feed in self._feeds.values())

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._poll_all())]

    async def stop(self) -> None:
        tasks = self._tasks + ([self._reader] if self._reader is not None else [])
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: UUID, after: int, wake: asyncio.Event | None = None):
        """The run's feed while the block runs; ``wake`` (the stream's own) is set whenever
        the feed has news or the run ended."""
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = Feed(last_seq=after)
        feed.subscribers += 1
        if wake is not None:
            feed.wakers.add(wake)
        try:
            yield feed
        finally:
            feed.subscribers -= 1
            feed.wakers.discard(wake)
            if feed.subscribers == 0:
                self._feeds.pop(run_id, None)

    async def refresh(self, run_id: UUID, *, notified: bool = False) -> None:
        """Read what is new for one run (see refresh_runs)."""
        await self.refresh_runs([run_id], notified=notified)

    async def refresh_runs(self, run_ids: list[UUID], *, notified: bool = False) -> None:
        """Read what is new for these runs, in one statement, and wake the subscribers of each
        run that has news (a notification always counts: the run may have ended without an
        event)."""
        async with self._reading:
            feeds = {run_id: self._feeds[run_id] for run_id in run_ids if run_id in self._feeds}
            if not feeds:
                return
            async with self._pool.connection() as conn:
                found = await events_after_each(
                    conn, {run_id: feed.last_seq for run_id, feed in feeds.items()},
                    limit=BUFFER_EVENTS)
                self.reads += 1
                quiet = [run_id for run_id in feeds if run_id not in found]
                if notified and quiet:
                    for run_id in await ended_without_terminal_events(conn, quiet):
                        feeds[run_id].ended = True
            for run_id, feed in feeds.items():
                rows = [row for row in found.get(run_id, ()) if row["seq"] > feed.last_seq]
                for row in rows:
                    row["frame"] = frame(row)  # encoded once, for every subscriber
                if rows:
                    feed.events = (feed.events + rows)[-BUFFER_EVENTS:]
                    feed.last_seq = rows[-1]["seq"]
                if rows or notified:
                    feed.wake()

    def _named_runs(self, run_ids: list[UUID]) -> None:
        """A wake-up named these runs: read the tailed ones in the next statement."""
        for run_id in run_ids:
            if run_id in self._feeds:
                self._named[run_id] = None
        if self._named and (self._reader is None or self._reader.done()):
            self._reader = asyncio.get_running_loop().create_task(self._read_named())

    async def _read_named(self) -> None:
        while self._named:
            run_ids, self._named = list(self._named), {}
            try:
                await self.refresh_runs(run_ids, notified=True)
            except psycopg.Error as exc:  # the poll reads them anyway
                log.warning("tail_read_failed", error=type(exc).__name__, runs=len(run_ids))

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
                        self._named_runs(parse_run_ids(note.payload))
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
        if self._feeds:
            await self.refresh_runs(list(self._feeds))
