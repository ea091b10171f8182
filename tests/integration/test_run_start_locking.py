"""The run start's promise about pauses, with real concurrent connections: a pause that commits
first is seen (the run start waits for it, then refuses and queues nothing), and a pause that
comes while a run start is in flight waits for that run to commit (so once a pause has returned,
no run of the agent can still appear). The start runs as start_agent_run (migration 0060), a
function that notifies nobody inside the run's transaction."""

from __future__ import annotations

import asyncio
import re

import psycopg
from tests.factories import create_agent
from tickwork.sql.ids import new_id

WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = %s AND wait_event_type = 'Lock'
"""


async def until_waiting(watch: psycopg.Connection, application: str, *pending: asyncio.Task):
    """Until a session of ``application`` waits on a lock (the tasks must still be pending)."""
    async with asyncio.timeout(10):
        while watch.execute(WAITING_ON_A_LOCK, (application,)).fetchone()[0] == 0:
            for task in pending:
                assert not task.done(), task.result()
            await asyncio.sleep(0.01)


def tenant_of(conn: psycopg.Connection, agent_id: str):
    return conn.execute("SELECT tenant_id FROM agents WHERE id = %s", (agent_id,)).fetchone()[0]


def runs_of(conn: psycopg.Connection, agent_id: str) -> int:
    return conn.execute("SELECT count(*) FROM executions WHERE agent_id = %s",
                        (agent_id,)).fetchone()[0]


def pausing(db_url: str, agent_id: str) -> psycopg.Connection:
    """A connection holding an uncommitted pause of the agent (its row lock until commit)."""
    conn = psycopg.connect(db_url, application_name="tickwork-test-pause")
    conn.execute("UPDATE agents SET status = 'paused' WHERE id = %s", (agent_id,))
    return conn


async def test_a_run_start_waits_for_a_pause_in_flight_then_refuses_and_queues_nothing(
        api, db_url):
    agent = await create_agent(api, "paused-under-it")
    with pausing(db_url, agent["id"]) as pause, \
            psycopg.connect(db_url, autocommit=True) as watch:
        start = asyncio.create_task(api.post(f"/v1/agents/{agent['id']}/runs", json={}))
        await until_waiting(watch, "tickwork-test", start)  # on the pause's row lock
        pause.commit()
        response = await start
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "agent_paused"
        assert runs_of(watch, agent["id"]) == 0
        assert watch.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 0


async def test_a_pause_waits_for_a_run_start_in_flight_to_commit(api, db_url):
    """The run start is held in flight after it read the agent as active: an uncommitted row
    with the same Idempotency-Key (which locks nothing of the agent) makes its insert wait.
    The pause must wait for the run start, so the run it then queues has committed by the time
    the pause returns."""
    agent = await create_agent(api, "paused-after")
    with psycopg.connect(db_url, application_name="tickwork-test-first") as first, \
            psycopg.connect(db_url, application_name="tickwork-test-pause") as pause, \
            psycopg.connect(db_url, autocommit=True) as watch:
        first.execute(  # the key's first use, not committed
            "INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
            " scheduled_for, idempotency_key, request_hash)"
            " VALUES (%s, %s, %s, 'run', 'api', now(), 'held', 'another body')",
            (new_id(), tenant_of(watch, agent["id"]), agent["id"]))
        start = asyncio.create_task(api.post(f"/v1/agents/{agent['id']}/runs", json={},
                                             headers={"Idempotency-Key": "held"}))
        await until_waiting(watch, "tickwork-test", start)  # in flight, the agent read active

        def pause_and_count() -> int:
            pause.execute("UPDATE agents SET status = 'paused' WHERE id = %s", (agent["id"],))
            with psycopg.connect(db_url) as fresh:  # what is committed once the pause may go on
                return runs_of(fresh, agent["id"])

        paused = asyncio.create_task(asyncio.to_thread(pause_and_count))
        await until_waiting(watch, "tickwork-test-pause", start, paused)  # on the run start
        first.rollback()  # the run start goes on and queues its own run
        response = await start
        assert response.status_code == 202, response.text
        assert await paused == 1  # the run had committed before the pause could go on
        pause.commit()

        refused = await api.post(f"/v1/agents/{agent['id']}/runs", json={})
        assert refused.status_code == 409, refused.text
        assert runs_of(watch, agent["id"]) == 1
        assert watch.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 1


def test_the_run_start_function_notifies_nobody_inside_the_run_transaction(db_url):
    with psycopg.connect(db_url) as conn:
        body = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'start_agent_run'"
                            ).fetchone()[0]
    statement = re.sub(r"--[^\n]*", "", body)
    assert "INSERT INTO executions" in statement
    assert not re.search(r"pg_notify|\bNOTIFY\b", statement, re.IGNORECASE)
