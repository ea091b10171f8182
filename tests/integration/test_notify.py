"""Wake-ups after the commit (sql/notify.py): the hot paths' statements notify nobody inside
their own transaction; the notifier sends what it is handed once the commit is done, coalesced
into one statement, each run named once; a tail follows a wake-up that names several runs."""

from __future__ import annotations

import asyncio
import re
from uuid import UUID

import psycopg

from tests.factories import create_agent, queue_run, scripted_agent
from tests.integration.workers import until
from tickwork.scheduler.api.hub import EventHub
from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id
from tickwork.sql.notify import RUN_IDS_PER_PAYLOAD, Notifier, parse_run_ids

# The statements a busy deployment runs per run: a NOTIFY in any of them would make its commit
# wait for every other notifying commit's disk flush (sql/notify.py).
HOT_PATH = ("insert_agent_run", "claim_queued_executions", "insert_journal_batch")


def test_the_hot_path_statements_notify_nobody_inside_their_transaction():
    for name in HOT_PATH:
        statement = re.sub(r"--[^\n]*", "", QUERIES[name])  # the comments may say why
        assert not re.search(r"pg_notify|\bNOTIFY\b", statement, re.IGNORECASE), name


async def listening(db_url: str, channel: str) -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
    await conn.execute(f"LISTEN {channel}")
    return conn


async def received(listener: psycopg.AsyncConnection, count: int) -> list[str]:
    """The next ``count`` payloads on the listener."""
    await listener.execute("SELECT 1")  # notifications sent before it arrive before its answer
    payloads: list[str] = []
    async with asyncio.timeout(10):
        async for note in listener.notifies():
            payloads.append(note.payload)
            if len(payloads) == count:
                return payloads
    return payloads


async def test_wake_ups_handed_over_together_are_one_statement_naming_each_run_once(pool, db_url):
    notifier = Notifier(pool)
    runs = [new_id() for _ in range(5)]
    listener = await listening(db_url, "tickwork_events")
    try:
        notifier.runs_changed(runs[:3])
        notifier.runs_changed(runs[2:])  # runs[2] twice: named once
        notifier.tasks_queued("run")
        await notifier.drain()
        assert notifier.statements == 1
        [payload] = await received(listener, 1)
    finally:
        await listener.close()
    assert parse_run_ids(payload) == runs


async def test_more_runs_than_one_payload_holds_are_split_and_none_is_lost(pool, db_url):
    notifier = Notifier(pool)
    runs = [new_id() for _ in range(2 * RUN_IDS_PER_PAYLOAD + 50)]
    listener = await listening(db_url, "tickwork_events")
    try:
        notifier.runs_changed(runs)
        await notifier.drain()
        payloads = await received(listener, 3)
    finally:
        await listener.close()
    assert all(len(payload.encode()) < 8000 for payload in payloads)
    assert [run for payload in payloads for run in parse_run_ids(payload)] == runs


async def test_a_run_started_through_the_api_wakes_workers_once_it_is_committed(api, db_url):
    agent = (await create_agent(api, tools=[]))["id"]
    listener = await listening(db_url, "tickwork_tasks")
    try:
        response = await api.post(f"/v1/agents/{agent}/runs", json={"input": {}})
        assert response.status_code == 202, response.text
        await api.app.state.notifier.drain()
        assert await received(listener, 1) == ["run"]
    finally:
        await listener.close()
    # The wake-up came after the commit: another session sees the run and its task.
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM queue_tasks WHERE execution_id = %s",
                            (response.json()["id"],)).fetchone()[0] == 1


def test_a_payload_that_is_not_run_ids_names_no_run():
    run = new_id()
    assert parse_run_ids(f"{run},not-an-id,,{run}") == [run, run]
    assert parse_run_ids("") == []


async def test_a_tail_follows_a_wake_up_that_names_several_runs(api, pool, db_url):
    """Two tailed runs grow; one NOTIFY names both: each feed reads its own run's events (the
    hub's poll is an hour away, so only the wake-up can have brought them)."""
    agent = await scripted_agent(api, [])
    run_ids = [UUID(await queue_run(api, agent, {"script": [{"text": "ok"}]})) for _ in range(2)]
    hub = EventHub(pool, db_url, poll_seconds=3600)
    hub.start()
    try:
        async with hub.subscribe(run_ids[0], 0) as first, hub.subscribe(run_ids[1], 0) as second:
            # The api fixture's hub and this one (a notification before it listens is lost).
            await until(db_url, "SELECT count(*) >= 2 FROM pg_stat_activity WHERE application_name"
                                " = 'tickwork-api-listen' AND state = 'idle'"
                                " AND datname = current_database()")
            changed = [first.changed, second.changed]
            with psycopg.connect(db_url, autocommit=True) as conn:
                for run_id in run_ids:
                    conn.execute("INSERT INTO run_events (execution_id, seq, type, payload)"
                                 " VALUES (%s, 1, 'run_start', '{}')", (run_id,))
                conn.execute("SELECT pg_notify('tickwork_events', %s)",
                             (",".join(str(run_id) for run_id in run_ids),))
            async with asyncio.timeout(10):
                await asyncio.gather(*(event.wait() for event in changed))
            assert [e["seq"] for e in first.events] == [1]
            assert [e["seq"] for e in second.events] == [1]
    finally:
        await hub.stop()
