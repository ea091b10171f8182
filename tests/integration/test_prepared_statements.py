"""Prepared statements (sql/db.py HOT_PATH): the statements every run repeats are prepared on
a connection's first use of them and nothing else ever is; a column added by a migration
while they are prepared does not break them; TICKWORK_PREPARED_STATEMENTS=false prepares
nothing (for a pooler in transaction mode that does not track them); a connection plans the
claim once, not at every claim."""

from __future__ import annotations

import psycopg

from tests.factories import make_agent, make_tenant, queue_runs_at_once
from tickwork.sql import QUERIES
from tickwork.sql.db import open_pool
from tickwork.sql.ids import new_id
from tickwork.worker.claim import claim_queued_runs


def queue(db_url: str, runs: int) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        for _ in range(runs):
            run_id = new_id()
            conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                         " trigger_source, scheduled_for) VALUES (%s, %s, %s, 'run', 'api',"
                         " now())", (run_id, tenant, agent))
            conn.execute("INSERT INTO queue_tasks (name, kind, execution_id)"
                         " VALUES (%s, 'run', %s)", (str(run_id), run_id))


def agent_of(db_url: str):
    with psycopg.connect(db_url, autocommit=True) as conn:
        return make_agent(conn, make_tenant(conn))


async def prepared_on(pool) -> list[str]:
    """The statements prepared on the pool's one connection."""
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT statement FROM pg_prepared_statements")
        return [row["statement"] for row in await cursor.fetchall()]


async def test_the_claim_is_prepared_on_first_use_and_other_statements_never(db_url):
    queue(db_url, 3)
    pool = await open_pool(db_url, application_name="tickwork-test-prepared", max_size=1)
    try:
        for _ in range(10):  # psycopg's own threshold would prepare after 5
            async with pool.connection() as conn:
                await conn.execute(QUERIES["get_database_now"])
        assert await claim_queued_runs(pool, limit=1, worker_id="w")
        [prepared] = await prepared_on(pool)
        assert prepared.startswith("-- The one statement that starts fresh runs")
        async with pool.connection() as conn:  # a migration adds a column meanwhile
            await conn.execute("ALTER TABLE executions ADD COLUMN later_column text")
        assert len(await claim_queued_runs(pool, limit=5, worker_id="w")) == 2
    finally:
        await pool.close()


async def test_nothing_is_prepared_when_the_setting_says_so(db_url, monkeypatch):
    monkeypatch.setenv("TICKWORK_PREPARED_STATEMENTS", "false")
    queue(db_url, 2)
    pool = await open_pool(db_url, application_name="tickwork-test-unprepared", max_size=1)
    try:
        assert len(await claim_queued_runs(pool, limit=1, worker_id="w")) == 1
        assert len(await claim_queued_runs(pool, limit=1, worker_id="w")) == 1
        assert await prepared_on(pool) == []
    finally:
        await pool.close()


async def test_a_connection_plans_the_claim_once_however_long_the_queue(db_url):
    """Postgres plans a prepared statement afresh for its first five executions, then keeps a
    generic plan if that is not dearer than the plans it made; the claim's must be kept even
    with thousands of tasks queued (its LIMIT was once estimated at a tenth of the queue, so
    every claim was planned again: a sixth of the claim's and the journal's time,
    bench/README.md)."""
    queue_runs_at_once(db_url, agent_of(db_url), 3000)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ANALYZE queue_tasks")
        conn.execute("ANALYZE executions")
    pool = await open_pool(db_url, application_name="tickwork-test-plans", max_size=1)
    try:
        for limit in (16, 7, 16, 3, 16, 12, 16, 1, 16, 9):
            assert len(await claim_queued_runs(pool, limit=limit, worker_id="w")) == limit
        async with pool.connection() as conn:
            cursor = await conn.execute("SELECT generic_plans, custom_plans"
                                        " FROM pg_prepared_statements")
            [plans] = await cursor.fetchall()
        assert plans == {"generic_plans": 5, "custom_plans": 5}
    finally:
        await pool.close()
