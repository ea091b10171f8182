"""The live tail of a run's journal as Server-Sent Events.

Replays what is stored after the client's last event, then follows live through the hub;
every frame's id is the event's per-run seq, so Last-Event-ID resumes exactly where the client
stopped. A keepalive comment goes out when nothing else has for the keepalive interval (it
uses no seq). The stream closes after run_complete, or when the run ended without one (a
cancelled queued run); a suspended run stays open until it resumes or the client leaves.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.api.hub import EventHub, frame
from tickwork.scheduler.runs import ended_without_terminal_event
from tickwork.sql.errors import InvalidInput
from tickwork.sql.journal import events_after

MAX_SEQ = 2**31 - 1
PAGE = 1000


def resume_point(last_event_id: str | None, after: int | None) -> int:
    """The seq to resume after: Last-Event-ID (what a browser sends itself) wins over ?after=."""
    if last_event_id is None:
        return after or 0
    text = last_event_id.strip()
    if not text.isascii() or not text.isdigit() or int(text) > MAX_SEQ:
        raise InvalidInput(f"Last-Event-ID must be an event's seq (a whole number from 0), "
                           f"got {last_event_id[:40]!r}", code="invalid_last_event_id",
                           field="Last-Event-ID")
    return int(text)


async def stream(hub: EventHub, pool: AsyncConnectionPool, run_id: UUID, after: int, *,
                 keepalive: float) -> AsyncIterator[bytes]:
    last, quiet_since, from_table, checked = after, time.monotonic(), True, False
    async with hub.subscribe(run_id, after) as feed:
        while True:
            changed = feed.changed  # taken before looking, so no wake-up is missed
            batch = feed.after(last)
            if from_table or batch is None:  # the start, or a gap the buffer cannot fill
                batch = await _from_table(pool, run_id, last)
                from_table = len(batch) == PAGE  # a full page: there may be more
            if batch:
                yield b"".join(event.get("frame") or frame(event) for event in batch)
                last, quiet_since = batch[-1]["seq"], time.monotonic()
                if any(event["type"] == "run_complete" for event in batch):
                    return
                continue
            if feed.ended or (not checked and await _ended_without_terminal_event(pool, run_id)):
                return
            checked = True  # from here on the hub says when a run ends without an event
            try:
                async with asyncio.timeout(max(keepalive - (time.monotonic() - quiet_since), 0.01)):
                    await changed.wait()
            except TimeoutError:
                yield b": keepalive\n\n"
                quiet_since = time.monotonic()


async def _from_table(pool: AsyncConnectionPool, run_id: UUID, after: int) -> list[dict]:
    async with pool.connection() as conn:
        return await events_after(conn, run_id, after, limit=PAGE)


async def _ended_without_terminal_event(pool: AsyncConnectionPool, run_id: UUID) -> bool:
    async with pool.connection() as conn:
        return await ended_without_terminal_event(conn, run_id)
