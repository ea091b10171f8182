"""A claim locks only the tasks it takes: while one worker's claim is still uncommitted, another
worker's claim finds every other queued task (SKIP LOCKED skips only what is really taken).
The claim's picking scans at most a fixed number of the oldest tasks and takes the worker's
limit of them; both plans Postgres may run it with (the first custom plans, then the generic
one it keeps) are checked, because a plan that locked every task it scanned would leave the
other workers nothing to claim."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.factories import make_agent, make_tenant, queue_runs_at_once
from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id
from tickwork.worker.runner import CLAIM_BATCH

QUEUED, FIRST_CLAIM = 300, 16


def claim(conn: psycopg.Connection, limit: int) -> list:
    return conn.execute(QUERIES["claim_queued_executions"],
                        {"limit": limit, "worker_id": "w", "claim_id": new_id(),
                         "tenant_cap": 0},
                        prepare=True).fetchall()


@pytest.mark.parametrize("plans", ["force_custom_plan", "force_generic_plan"])
def test_an_uncommitted_claim_leaves_every_other_task_to_the_next_claim(db_url, plans):
    with psycopg.connect(db_url, autocommit=True) as conn:
        queue_runs_at_once(db_url, make_agent(conn, make_tenant(conn)), QUEUED)
        conn.execute("ANALYZE queue_tasks")
    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        first.execute(f"SET plan_cache_mode = {plans}")
        second.execute(f"SET plan_cache_mode = {plans}")
        first.commit()
        second.commit()
        assert len(claim(first, FIRST_CLAIM)) == FIRST_CLAIM  # left uncommitted
        free = second.execute("SELECT count(*) FROM (SELECT 1 FROM queue_tasks"
                              " FOR UPDATE SKIP LOCKED) unlocked").fetchone()[0]
        assert free == QUEUED - FIRST_CLAIM
        second.rollback()
        assert len(claim(second, CLAIM_BATCH)) == min(CLAIM_BATCH, QUEUED - FIRST_CLAIM)
        first.commit()
        second.commit()
    with psycopg.connect(db_url) as conn:
        claims = conn.execute("SELECT count(*), count(DISTINCT execution_id)"
                              " FROM execution_claims").fetchone()
    assert claims == (min(QUEUED, FIRST_CLAIM + CLAIM_BATCH),) * 2


def test_the_claims_scan_covers_the_largest_claim_a_worker_makes():
    """The picking's fixed bound (LIMIT n in claim_queued_executions) must not be below the
    worker's largest claim, or a claim would come back short while tasks wait."""
    bounds = [int(n) for n in re.findall(r"LIMIT (\d+)", QUERIES["claim_queued_executions"])]
    assert bounds and all(bound >= CLAIM_BATCH for bound in bounds if bound != 1), bounds
