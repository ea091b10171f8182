"""The tails' hub: one statement reads every run a wake-up names, and each feed gets only its
own run's events."""

from __future__ import annotations

import asyncio
from uuid import UUID

import psycopg

from tests.factories import queue_run, scripted_agent
from tickwork.scheduler.api.hub import EventHub


def journal(db_url: str, run_id: UUID, *types: str, first: int = 1) -> None:
    """Append events straight to the table (the hub reads what is stored, whoever wrote it)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for seq, kind in enumerate(types, start=first):
            conn.execute("INSERT INTO run_events (execution_id, seq, type, payload)"
                         " VALUES (%s, %s, %s, '{}')", (run_id, seq, kind))


async def queued_runs(api, count: int) -> list[UUID]:
    agent = await scripted_agent(api, [])
    return [UUID(await queue_run(api, agent, {"script": [{"text": "ok"}]})) for _ in range(count)]


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
