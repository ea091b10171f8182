"""Claims are fair between tenants (DESIGN.md third round, RELIABILITY R15): the claim takes
queued runs round-robin across the tenants with work, so one tenant's backlog delays another's
next run by at most one claim; TICKWORK_TENANT_MAX_CONCURRENT_RUNS bounds a tenant's running
runs and an agent's max_concurrent_runs its own, even with two workers claiming at once."""

from __future__ import annotations

import threading

import psycopg

from tests.factories import make_agent, make_tenant, queue_runs_at_once
from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id


def claim(conn: psycopg.Connection, limit: int, *, tenant_cap: int = 0,
          worker: str = "w") -> list:
    return conn.execute(QUERIES["claim_queued_executions"],
                        {"limit": limit, "worker_id": worker, "claim_id": new_id(),
                         "tenant_cap": tenant_cap}, prepare=True).fetchall()


def two_tenants(db_url: str) -> tuple:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return (make_agent(conn, make_tenant(conn, "a")), make_agent(conn, make_tenant(conn, "b")))


def running(db_url: str, where: str = "true") -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute(f"SELECT count(*) FROM executions WHERE status = 'running'"
                            f" AND {where}").fetchone()[0]


def test_a_tenants_run_is_in_the_first_claim_behind_another_tenants_backlog(db_url):
    agent_a, agent_b = two_tenants(db_url)
    backlog = queue_runs_at_once(db_url, agent_a, 120, age="1 minute")
    [late] = queue_runs_at_once(db_url, agent_b, 1)
    with psycopg.connect(db_url, autocommit=True) as first, \
            psycopg.connect(db_url, autocommit=True) as second:
        taken = claim(first, 4) + claim(second, 4)  # the first round of two workers of 4 slots
    ids = [row[0] for row in taken]
    assert late in ids[:2]  # in the first claim, and the first of its tenant's turn
    assert len(ids) == len(set(ids)) == 8
    assert set(ids) - {late} <= set(backlog)


def test_each_tenant_gets_its_turn_and_the_claim_is_still_filled(db_url):
    agent_a, agent_b = two_tenants(db_url)
    queue_runs_at_once(db_url, agent_a, 30, age="1 minute")
    queue_runs_at_once(db_url, agent_b, 2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        taken = claim(conn, 10)
        tenants = [row[1] for row in taken]
        [tenant_b] = conn.execute("SELECT tenant_id FROM agents WHERE id = %s",
                                  (agent_b,)).fetchone()
    assert len(taken) == 10  # B had fewer than its share: A's oldest fill the rest
    assert tenants.count(tenant_b) == 2 and tenant_b in tenants[:2]


def claim_beside(db_url: str, limit: int, tenant_cap: int, held: psycopg.Connection) -> list:
    """A second worker's claim while ``held``'s claim is uncommitted: it waits for the held
    one's tenant lock, and the held one commits once this one is seen waiting."""
    result: list = []

    def second() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            result.extend(claim(conn, limit, tenant_cap=tenant_cap, worker="w2"))

    thread = threading.Thread(target=second)
    thread.start()
    with psycopg.connect(db_url, autocommit=True) as watcher:
        for _ in range(2000):  # until the second claim waits on the lock (or already ended)
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND wait_event = 'advisory'").fetchone()[0]
            if waiting or not thread.is_alive():
                break
            thread.join(0.01)
    held.commit()
    thread.join()
    return result


def test_two_workers_claiming_at_once_never_take_a_tenant_past_its_cap(db_url):
    agent_a, _ = two_tenants(db_url)
    queue_runs_at_once(db_url, agent_a, 50)
    with psycopg.connect(db_url) as first:  # a transaction left open: the claim uncommitted
        assert len(claim(first, 8, tenant_cap=3)) == 3
        second = claim_beside(db_url, 8, 3, first)
    assert second == []
    assert running(db_url) == 3
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE executions SET status = 'completed', outcome = 'done',"
                     " finished_at = now() WHERE id = (SELECT id FROM executions"
                     " WHERE status = 'running' LIMIT 1)")
        assert len(claim(conn, 8, tenant_cap=3)) == 1
        assert len(claim(conn, 8, tenant_cap=3)) == 0
        assert len(claim(conn, 8)) == 8  # the cap is the worker's setting: none, no bound
    assert running(db_url) == 11


def test_two_workers_claiming_at_once_never_take_an_agent_past_its_max_concurrent_runs(db_url):
    agent_a, agent_b = two_tenants(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = conn.execute("SELECT tenant_id FROM agents WHERE id = %s",
                              (agent_a,)).fetchone()[0]
        other = make_agent(conn, tenant, "other")  # same tenant, no cap of its own
        conn.execute("UPDATE agents SET max_concurrent_runs = 2 WHERE id = %s", (agent_a,))
    queue_runs_at_once(db_url, agent_a, 20, age="1 minute")
    queue_runs_at_once(db_url, other, 3)
    with psycopg.connect(db_url) as first:
        taken = claim(first, 10)
        second = claim_beside(db_url, 10, 0, first)
    assert sum(row[2] == agent_a for row in taken) == 2
    assert sum(row[2] == other for row in taken) == 3  # the capped agent holds back no other
    assert second == []
    assert running(db_url, f"agent_id = '{agent_a}'") == 2


def test_a_run_held_back_by_a_cap_stays_queued_for_a_later_claim(db_url):
    agent_a, _ = two_tenants(db_url)
    queue_runs_at_once(db_url, agent_a, 5)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert len(claim(conn, 5, tenant_cap=2)) == 2
        queued = conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0]
        claims = conn.execute("SELECT count(*) FROM execution_claims").fetchone()[0]
    assert (queued, claims) == (3, 2)


async def two_workers_at_work(db_url: str, agent, runs: int, **settings) -> int:
    """Two in-process workers of 4 slots each run ``runs`` short runs of the agent; the most
    runs ever inside their model at once (every run's turn is one scripted sleep)."""
    from tests.integration.test_claim_ahead import AtWork
    from tests.integration.test_visible_events import gated_worker
    from tests.integration.workers import all_done, until
    from tickwork.sql.db import open_pool

    queue_runs_at_once(db_url, agent, runs, script=[{"sleep": 0.005}, {"text": "ok"}])
    at_work = AtWork()
    pools = [await open_pool(db_url, application_name=f"tickwork-test-fair-{n}", max_size=4)
             for n in range(2)]
    try:
        async with gated_worker(pools[0], db_url, model=at_work, concurrency=4, **settings), \
                gated_worker(pools[1], db_url, model=at_work, concurrency=4, **settings):
            await until(db_url, all_done(runs))
    finally:
        for pool in pools:
            await pool.close()
    return at_work.most


async def test_two_real_workers_never_run_more_of_a_tenant_than_its_cap(db_url):
    agent_a, _ = two_tenants(db_url)
    assert await two_workers_at_work(db_url, agent_a, 40, tenant_max_concurrent_runs=2) == 2


async def test_two_real_workers_never_run_more_of_an_agent_than_its_max_concurrent_runs(db_url):
    agent_a, _ = two_tenants(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE agents SET max_concurrent_runs = 1 WHERE id = %s", (agent_a,))
    assert await two_workers_at_work(db_url, agent_a, 30) == 1
