"""The live tail of a run's journal as Server-Sent Events.

Replays what is stored after the client's last event, then follows live through the hub;
every frame's id is the event's per-run seq, so Last-Event-ID resumes exactly where the client
stopped. A keepalive comment goes out when nothing else has for the keepalive interval (it
uses no seq). The stream closes after run_complete, or when the run ended without one (a
cancelled queued run); a suspended run stays open until it resumes or the client leaves, and
it ends within about a second of its token's revocation or expiry.

A stream is a plain ASGI response (TailResponse): its own task waits on one wake-up that the
hub, the token watch and the client's hang-up set, and sends from there, so 500 streams cost
the hub 500 Event.set calls per batch and nothing else (no generator chain, no extra task and
future per chunk), and a client that reads slowly holds up only its own stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Awaitable, Callable
from uuid import UUID

from psycopg_pool import AsyncConnectionPool
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tickwork.scheduler.api.hub import EventHub, frame
from tickwork.scheduler.api.revocation import RevocationWatch
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


class TailResponse(Response):
    """The SSE stream of one run (see the module's docstring): FastAPI sends it like any
    response, by calling it."""

    media_type = "text/event-stream"

    def __init__(self, hub: EventHub, pool: AsyncConnectionPool, run_id: UUID, after: int, *,
                 keepalive: float, watch: RevocationWatch | None = None,
                 token_id: UUID | None = None) -> None:
        """watch and token_id: the tail ends when that token is revoked or expires."""
        self.status_code, self.background = 200, None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._hub, self._pool, self._run_id, self._after = hub, pool, run_id, after
        self._keepalive, self._watch, self._token_id = keepalive, watch, token_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        wake = asyncio.Event()
        gone = asyncio.ensure_future(_until_disconnect(receive))
        gone.add_done_callback(lambda _: wake.set())

        async def chunk(body: bytes) -> None:
            await send({"type": "http.response.body", "body": body, "more_body": True})

        try:
            async with self._revocation(wake) as revoked:
                await self.follow(chunk, wake, lambda: gone.done() or revoked.is_set())
            if not gone.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()

    async def follow(self, send: Callable[[bytes], Awaitable[None]], wake: asyncio.Event,
                     stopped: Callable[[], bool]) -> None:
        """What the stream sends (a chat's stream follows several runs: chat_tail.py)."""
        await follow(self._hub, self._pool, self._run_id, self._after,
                     keepalive=self._keepalive, send=send, wake=wake, stopped=stopped)

    def _revocation(self, wake: asyncio.Event):
        if self._watch is None or self._token_id is None:
            return contextlib.nullcontext(asyncio.Event())
        return self._watch.watch(self._token_id, wake)


# An ASGI message type, not a journal event type (tests/unit/test_vocabulary.py scans this
# module's comparisons with "type" for the journal's vocabulary).
ASGI_DISCONNECT = "http.disconnect"


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != ASGI_DISCONNECT:
        pass


async def follow(hub: EventHub, pool: AsyncConnectionPool, run_id: UUID, after: int, *,
                 keepalive: float, send: Callable[[bytes], Awaitable[None]],
                 wake: asyncio.Event, stopped: Callable[[], bool],
                 render: Callable[[dict], bytes] | None = None) -> None:
    """Send the run's journal after ``after`` and follow it live until run_complete, the run's
    end without one, or ``stopped()`` (checked whenever ``wake`` was set). render: each event's
    SSE frame (default: the hub's, whose id is the seq)."""
    loop = asyncio.get_running_loop()
    last, quiet_since, from_table, checked = after, loop.time(), True, False
    timer: asyncio.TimerHandle | None = None  # the keepalive's: armed once per quiet interval

    def due() -> None:
        nonlocal timer
        timer = None
        wake.set()

    try:
        async with hub.subscribe(run_id, after, wake) as feed:
            while not stopped():
                wake.clear()  # before looking, so no wake-up is missed
                batch = feed.after(last)
                if from_table or batch is None:  # the start, or a gap the buffer cannot fill
                    batch = await _from_table(pool, run_id, last)
                    from_table = len(batch) == PAGE  # a full page: there may be more
                if batch:
                    await send(b"".join(render(event) if render is not None
                                        else event.get("frame") or frame(event)
                                        for event in batch))
                    last, quiet_since = batch[-1]["seq"], loop.time()
                    if any(event["type"] == "run_complete" for event in batch):
                        return
                    continue
                if feed.ended or (not checked
                                  and await _ended_without_terminal_event(pool, run_id)):
                    return
                checked = True  # from here on the hub says when a run ends without an event
                if loop.time() - quiet_since >= keepalive - 0.01:
                    await send(b": keepalive\n\n")
                    quiet_since = loop.time()
                    continue
                if timer is None:  # one timer per quiet interval, not one per wake-up
                    timer = loop.call_at(quiet_since + keepalive, due)
                await wake.wait()
    finally:
        if timer is not None:
            timer.cancel()


async def _from_table(pool: AsyncConnectionPool, run_id: UUID, after: int) -> list[dict]:
    async with pool.connection() as conn:
        return await events_after(conn, run_id, after, limit=PAGE)


async def _ended_without_terminal_event(pool: AsyncConnectionPool, run_id: UUID) -> bool:
    async with pool.connection() as conn:
        return await ended_without_terminal_event(conn, run_id)
