"""GET /v1/chats/{id}/events: one resumable SSE stream of every run of a chat, in order.

It is the run tail (tail.py) run after run: each run of the chat (its messages in order, each
message's attempts oldest first) is followed with the same replay-then-hub machinery until its
run_complete (or its end without one), then the next; a run waiting for a person keeps the
stream on it until it resumes. Between runs the stream waits for the chat's next message: the
API that posts one wakes the chat's streams through the hub (the chat id is the wake-up's key),
and a poll every second finds a message posted through another API process.

Every frame's id is "{run_id}:{seq}" and its data carries run_id beside the event's fields, so
Last-Event-ID resumes across runs exactly after the last event the client saw: the rest of that
run, then the runs after it. Keepalive comments, as on a run's tail.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable
from uuid import UUID

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.api.hub import EventHub
from tickwork.scheduler.api.tail import MAX_SEQ, TailResponse, follow
from tickwork.scheduler.runs import check_resumable
from tickwork.scheduler.serialize import EVENT_FIELDS, pick
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import InvalidInput
from tickwork.sql.journal import events_after

MAX_RUNS = 100_000  # runs of one chat read at once (a chat has one run per message, and retries)
# Between runs, how often a stream looks for the chat's next run by itself: a message posted
# through any API process wakes the chat's streams at once (its NOTIFY reaches every hub), so
# this is only the truth behind a lost notification, kept rare because it is one statement per
# waiting stream.
POLL_SECONDS = 5.0


def chat_frame(run_id: str, event: dict[str, Any]) -> bytes:
    """One event of a chat's stream: its id names the run and the seq."""
    data = json.dumps({"run_id": run_id, **pick(event, EVENT_FIELDS)}, ensure_ascii=True,
                      separators=(",", ":"))
    return (f"id: {run_id}:{event['seq']}\nevent: {event['type']}\ndata: {data}\n\n"
            .encode("ascii"))


def chat_resume_point(last_event_id: str | None) -> tuple[UUID, int] | None:
    """The run and seq a reader saw last (Last-Event-ID "{run_id}:{seq}"), or None: from the
    chat's first run."""
    if last_event_id is None:
        return None
    run_text, _, seq_text = last_event_id.strip().partition(":")
    try:
        run_id = UUID(run_text)
    except ValueError:
        run_id = None
    if run_id is None or not seq_text.isascii() or not seq_text.isdigit() \
            or int(seq_text) > MAX_SEQ:
        raise InvalidInput(f"Last-Event-ID must be an event id of this chat's stream "
                           f"(\"<run id>:<seq>\"), got {last_event_id[:80]!r}",
                           code="invalid_last_event_id", field="Last-Event-ID")
    return run_id, int(seq_text)


async def chat_runs(conn: AsyncConnection, chat_id: UUID, from_seq: int = 1) -> list[tuple]:
    """(message seq, run id) of the chat's runs in stream order, from a message on."""
    cursor = await conn.execute(QUERIES["list_chat_runs"], {
        "chat_id": chat_id, "from_seq": from_seq, "limit": MAX_RUNS})
    return [(row["seq"], row["id"]) for row in await cursor.fetchall()]


async def check_chat_resumable(conn: AsyncConnection, principal: Principal, chat_id: UUID,
                               resume: tuple[UUID, int] | None) -> None:
    """A resume point names a run of this chat with at least that many events."""
    if resume is None:
        return
    run_id, after = resume
    if run_id not in {run for _, run in await chat_runs(conn, chat_id)}:
        raise InvalidInput(f"Last-Event-ID names run {run_id}, which is not a run of chat "
                           f"{chat_id}; resume from an id this stream sent",
                           code="invalid_last_event_id", field="Last-Event-ID")
    await check_resumable(conn, principal, run_id, after)


async def chat_events(conn: AsyncConnection, chat_id: UUID,
                      resume: tuple[UUID, int] | None) -> list[dict[str, Any]]:
    """The chat's stored events after the resume point, as the JSON list shows them."""
    items, started = [], resume is None
    for _, run_id in await chat_runs(conn, chat_id):
        after = 0
        if not started:
            if run_id != resume[0]:
                continue
            started, after = True, resume[1]
        for event in await events_after(conn, run_id, after, limit=100_000):
            items.append({"id": f"{run_id}:{event['seq']}", "run_id": str(run_id),
                          **pick(event, EVENT_FIELDS)})
    return items


class ChatTailResponse(TailResponse):
    """The SSE stream of a chat (see the module's note): a run tail that moves on."""

    def __init__(self, hub: EventHub, pool: AsyncConnectionPool, chat_id: UUID,
                 resume: tuple[UUID, int] | None, **kwargs: Any) -> None:
        super().__init__(hub, pool, chat_id, 0, **kwargs)
        self._chat_id, self._resume = chat_id, resume

    async def follow(self, send: Callable[[bytes], Awaitable[None]], wake: asyncio.Event,
                     stopped: Callable[[], bool]) -> None:
        current, after = self._resume or (None, 0)
        message_seq = 1
        if current is not None:
            message_seq = await self._message_seq(current)
            if await self._ended_at(current, after):
                after = None  # the reader saw its last event: go on to the next run
        while not stopped():
            if current is not None and after is not None:
                run_text = str(current)
                await follow(self._hub, self._pool, current, after, keepalive=self._keepalive,
                             send=send, wake=wake, stopped=stopped,
                             render=lambda event: chat_frame(run_text, event))
                if stopped():
                    return
            found = await self._next_run(current, message_seq, send, wake, stopped)
            if found is None:
                return
            (message_seq, current), after = found, 0

    async def _message_seq(self, run_id: UUID) -> int:
        async with self._pool.connection() as conn:
            return next((seq for seq, run in await chat_runs(conn, self._chat_id)
                         if run == run_id), 1)

    async def _ended_at(self, run_id: UUID, seq: int) -> bool:
        """Whether the event at seq was the run's last (run_complete)."""
        if seq == 0:
            return False
        async with self._pool.connection() as conn:
            row = await (await conn.execute(QUERIES["get_run_event_type"], {
                "execution_id": run_id, "seq": seq})).fetchone()
        return row is not None and row["type"] == "run_complete"

    async def _next_run(self, current: UUID | None, message_seq: int,
                        send: Callable[[bytes], Awaitable[None]], wake: asyncio.Event,
                        stopped: Callable[[], bool]) -> tuple[int, UUID] | None:
        """The run after ``current`` in the chat's order, once there is one (None: stopped).
        While there is none, keepalives go out and the stream waits for a message."""
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        # Subscribed before looking, so a message posted in between still wakes us.
        async with self._hub.subscribe(self._chat_id, 0, wake):
            while not stopped():
                wake.clear()
                async with self._pool.connection() as conn:
                    runs = await chat_runs(conn, self._chat_id, message_seq)
                ids = [run for _, run in runs]
                at = ids.index(current) + 1 if current in ids else 0
                if at < len(runs):
                    return runs[at]
                if loop.time() - quiet_since >= self._keepalive - 0.01:
                    await send(b": keepalive\n\n")
                    quiet_since = loop.time()
                timeout = min(POLL_SECONDS, max(0.01, quiet_since + self._keepalive
                                                - loop.time()))
                try:
                    await asyncio.wait_for(wake.wait(), timeout)
                except TimeoutError:
                    pass
        return None
