"""The gate in front of the pool (scheduler/api/pool_gate.py): many more requests than
connections all get one, none of them waits in the pool's own queue, and a request that cannot
get one within the pool's timeout is refused as the pool would refuse it."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from tickwork.scheduler.api.pool_gate import PoolGate
from tickwork.sql.db import open_pool


async def test_forty_requests_on_four_connections_each_get_one_and_none_queues_in_the_pool(
        db_url):
    pool = await open_pool(db_url, application_name="tickwork-test", min_size=4, max_size=4)
    gate, served, in_use, most = PoolGate(pool), [], 0, 0

    async def request(n: int) -> None:
        nonlocal in_use, most
        async with gate.connection() as conn:
            in_use += 1
            most = max(most, in_use)
            row = await (await conn.execute("SELECT %s::int AS n", (n,))).fetchone()
            served.append(row["n"])
            await asyncio.sleep(0.005)  # hold it, so the others must wait
            in_use -= 1

    try:
        await asyncio.gather(*(request(n) for n in range(40)))
        stats = pool.get_stats()
    finally:
        await pool.close()
    assert sorted(served) == list(range(40))
    assert most == 4
    assert stats.get("requests_num") == 40
    assert stats.get("requests_queued", 0) == 0  # every wait was at the gate


async def test_a_request_that_waits_past_the_pool_timeout_is_refused_as_the_pool_would(db_url):
    pool = await open_pool(db_url, application_name="tickwork-test", min_size=1, max_size=1)
    pool.timeout = 0.2
    gate = PoolGate(pool)
    try:
        async with gate.connection():
            with pytest.raises(PoolTimeout):
                async with gate.connection():
                    pass
        async with gate.connection() as conn:  # the refused request gave its slot back
            assert (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"] == 1
    finally:
        await pool.close()


async def test_run_starts_beyond_the_pool_size_all_queue_their_run_once(api, db_url):
    agent = (await api.post("/v1/agents", json={"name": "busy"})).json()
    responses = await asyncio.gather(*(api.post(f"/v1/agents/{agent['id']}/runs", json={})
                                       for _ in range(40)))  # the test pool has 8 connections
    assert [r.status_code for r in responses] == [202] * 40
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 40
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == 40
        assert {row[0] for row in conn.execute("SELECT name FROM queue_tasks")} == ids
