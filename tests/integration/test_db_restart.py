"""A database restart costs no request, no tick and no worker statement: pooled connections
the server hung up on are replaced at checkout (sql.db.Pool), without a round trip.

The shared Postgres is not restarted here (others test against it): the test database's own
pooled backends are terminated with pg_terminate_backend, which is what a restart looks like
to a pooled connection (the server's FATAL goodbye, then a closed socket)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.tick import run_tick
from tickwork.sql.db import connect_kwargs, open_pool
from tests.integration.workers import scalar
from tickwork.worker.claim import claim_queued_runs


def terminate_backends(db_url: str, application_name: str) -> int:
    """Kill every session of ``application_name`` in the test database and wait until each
    backend is gone (pg_terminate_backend's timeout argument waits for it)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (application_name,)).fetchone()[0]
    return killed


async def hold_all(pool, count: int) -> list[int]:
    """Check out ``count`` connections at once (so each is a different one) and run a
    statement on each: the backend pids that answered."""
    conns = [await pool.getconn() for _ in range(count)]
    try:
        return [(await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone())["pid"]
                for conn in conns]
    finally:
        for conn in conns:
            await pool.putconn(conn)


async def test_every_pooled_connection_killed_is_replaced_before_its_next_statement(db_url):
    pool = await open_pool(db_url, application_name="tickwork-test-restart", min_size=3,
                           max_size=3)
    try:
        before = await hold_all(pool, 3)
        assert terminate_backends(db_url, "tickwork-test-restart") == 3
        after = await hold_all(pool, 3)  # no statement fails
        assert pool.replaced_dead == 3
        assert not set(before) & set(after)
        assert await hold_all(pool, 3)  # the fresh ones stay: nothing more replaced
        assert pool.replaced_dead == 3
    finally:
        await pool.close()


async def test_a_plain_pool_without_the_checkout_test_fails_the_first_statement(db_url):
    """What the pool fixes: psycopg_pool without a check hands out the dead connection."""
    pool = AsyncConnectionPool(db_url, min_size=1, max_size=1, open=False,
                               kwargs=connect_kwargs("tickwork-test-plain"))
    await pool.open(wait=True)
    try:
        await hold_all(pool, 1)
        assert terminate_backends(db_url, "tickwork-test-plain") == 1
        with pytest.raises(psycopg.OperationalError):
            await hold_all(pool, 1)
    finally:
        await pool.close()


async def test_the_first_api_requests_after_a_restart_succeed(api, pool, db_url):
    assert (await api.get("/v1/agents")).status_code == 200
    await hold_all(pool, 4)  # four pooled connections for the requests below to meet
    assert terminate_backends(db_url, "tickwork-test") >= 4
    statuses = [(await api.get("/v1/agents")).status_code for _ in range(6)]
    assert statuses == [200] * 6
    assert pool.replaced_dead >= 1


async def test_a_tick_and_a_worker_claim_after_a_restart_succeed(pool, db_url, settings):
    await hold_all(pool, 4)
    assert terminate_backends(db_url, "tickwork-test") >= 4
    outcome = await run_tick(pool, settings)
    assert (outcome.ok, outcome.error) == (True, None)
    assert terminate_backends(db_url, "tickwork-test") >= 1
    assert await claim_queued_runs(pool, limit=4, worker_id="test") == []
    assert pool.replaced_dead >= 2
    assert scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                          " current_database() AND application_name = 'tickwork-test'") >= 1
