"""A run start whose Idempotency-Key's first request commits while this one waits on it: the
one-statement run start (sql start_agent_run) cannot see that run in its snapshot, so it reads
it again and answers with it; nothing is inserted twice."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg.types.json import Jsonb

from tickwork.scheduler.runs import request_hash
from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id

LOCK_WAITERS = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = 'tickwork-test'
   AND wait_event_type = 'Lock'
"""


async def test_a_same_key_request_that_waited_on_the_first_answers_with_its_run(api, db_url):
    agent = (await api.post("/v1/agents", json={"name": "raced"})).json()
    first_id = new_id()
    body_hash = request_hash(f"agents/{agent['id']}/runs", {"input": {}, "timeout_minutes": 5})
    with psycopg.connect(db_url) as first, psycopg.connect(db_url, autocommit=True) as watch:
        tenant_id = first.execute("SELECT tenant_id FROM agents WHERE id = %s",
                                  (agent["id"],)).fetchone()[0]
        # The key's first request, inside its transaction and not yet committed.
        first.execute(QUERIES["insert_agent_run"], {
            "id": first_id, "tenant_id": tenant_id, "agent_id": agent["id"], "schedule_id": None,
            "trigger_type": "run", "trigger_source": "api", "max_attempts": 3,
            "timeout_minutes": 5, "input": Jsonb({}), "idempotency_key": "raced",
            "request_hash": body_hash})
        second = asyncio.create_task(api.post(f"/v1/agents/{agent['id']}/runs",
                                              json={"input": {}},
                                              headers={"Idempotency-Key": "raced"}))
        while watch.execute(LOCK_WAITERS).fetchone()[0] == 0:  # until it waits on the key
            assert not second.done(), second.result().text
            await asyncio.sleep(0.01)
        first.commit()
        response = await second

    assert response.status_code == 202, response.text
    assert response.json()["id"] == str(first_id)
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 1
