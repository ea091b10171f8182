"""The tails' hub and the stream as an ASGI response: one statement reads every run a wake-up
names, each feed gets only its own run's events, a stream that cannot send holds up no other,
and a stream whose client hangs up ends and leaves the hub."""

from __future__ import annotations

import asyncio
from uuid import UUID

import psycopg

from tests.factories import queue_run, scripted_agent
from tickwork.scheduler.api.hub import EventHub
from tickwork.scheduler.api.tail import TailResponse


def journal(db_url: str, run_id: UUID, *types: str, first: int = 1) -> None:
    """Append events straight to the table (the hub reads what is stored, whoever wrote it)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for seq, kind in enumerate(types, start=first):
            conn.execute("INSERT INTO run_events (execution_id, seq, type, payload)"
                         " VALUES (%s, %s, %s, '{}')", (run_id, seq, kind))


async def queued_runs(api, count: int) -> list[UUID]:
    agent = await scripted_agent(api, [])
    return [UUID(await queue_run(api, agent, {"script": [{"text": "ok"}]})) for _ in range(count)]


class Client:
    """One stream's ASGI peer: what it was sent, a send that can be made to hang, a hang-up."""

    def __init__(self, *, hang_after_first: bool = False) -> None:
        self.bodies: list[bytes] = []
        self.hang_after_first = hang_after_first
        self.stuck = asyncio.Event()  # the send hangs now (the client stopped reading)
        self.unstuck = asyncio.Event()
        self.hung_up = asyncio.Event()
        self.first = asyncio.Event()  # the first chunk arrived (the stream has subscribed)
        self.ended = False
        self._requested = False

    async def receive(self) -> dict:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.hung_up.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        if message["type"] != "http.response.body":
            return
        if not message.get("more_body"):
            self.ended = True
            return
        self.bodies.append(message["body"])
        self.first.set()
        if self.hang_after_first and len(self.bodies) == 1:
            self.stuck.set()
            await self.unstuck.wait()

    def seqs(self) -> list[int]:
        text = b"".join(self.bodies).decode()
        return [int(line[4:]) for line in text.split("\n") if line.startswith("id: ")]


async def stream(hub: EventHub, pool, run_id: UUID, client: Client) -> None:
    await TailResponse(hub, pool, run_id, 0, keepalive=3600)(
        {"type": "http"}, client.receive, client.send)


async def test_one_statement_reads_every_named_run_and_each_feed_gets_its_own_events(api, pool, db_url):
    runs = await queued_runs(api, 3)
    for i, run_id in enumerate(runs):
        journal(db_url, run_id, *["step_start"] * (i + 1))
    hub = EventHub(pool, db_url, poll_seconds=3600)  # not started: only these reads happen
    async with hub.subscribe(runs[0], 0) as a, hub.subscribe(runs[1], 0) as b, \
            hub.subscribe(runs[2], 1) as c:
        await hub.refresh_runs([*runs, UUID(int=7)], notified=True)  # one is tailed by nobody
        assert hub.reads == 1
        assert [e["seq"] for e in a.events] == [1]
        assert [e["seq"] for e in b.events] == [1, 2]
        assert [e["seq"] for e in c.events] == [2, 3]  # after the seq it was subscribed at
        journal(db_url, runs[1], "tool_start", first=3)
        await hub.refresh_runs(runs)
        assert hub.reads == 2
        assert [e["seq"] for e in b.events] == [1, 2, 3] and len(a.events) == 1
    await hub.refresh_runs(runs)  # nobody tails them any more: nothing to read
    assert hub.reads == 2


async def test_a_stream_that_cannot_send_holds_up_no_other_stream_of_the_run(api, pool, db_url):
    [run_id] = await queued_runs(api, 1)
    journal(db_url, run_id, "run_start")
    hub = EventHub(pool, db_url, poll_seconds=3600)
    slow, fast = Client(hang_after_first=True), Client()
    slow_task = asyncio.create_task(stream(hub, pool, run_id, slow))
    fast_task = asyncio.create_task(stream(hub, pool, run_id, fast))
    await slow.stuck.wait()  # the slow one's send hangs on its first chunk
    await fast.first.wait()  # and the fast one has subscribed and replayed
    assert hub.subscribers == 2
    journal(db_url, run_id, "step_start", "run_complete", first=2)
    await hub.refresh_runs([run_id], notified=True)
    await asyncio.wait_for(fast_task, 30)  # a guard against a hang, not a timing claim
    assert fast.seqs() == [1, 2, 3] and fast.ended
    assert not slow_task.done() and slow.seqs() == [1]
    slow.unstuck.set()  # the slow client reads again: it gets the rest, once each
    await asyncio.wait_for(slow_task, 30)
    assert slow.seqs() == [1, 2, 3] and slow.ended
    assert hub.subscribers == 0


async def test_a_stream_whose_client_hangs_up_ends_and_leaves_the_hub(api, pool, db_url):
    [run_id] = await queued_runs(api, 1)
    journal(db_url, run_id, "run_start")
    hub = EventHub(pool, db_url, poll_seconds=3600)
    client = Client()
    task = asyncio.create_task(stream(hub, pool, run_id, client))
    await client.first.wait()
    assert hub.subscribers == 1
    client.hung_up.set()
    await asyncio.wait_for(task, 30)
    assert hub.subscribers == 0 and client.seqs() == [1]
