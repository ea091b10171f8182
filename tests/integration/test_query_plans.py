"""The hot statements reach their rows by key whatever the statistics say: the plans Postgres
chooses (EXPLAIN, not run) for a database whose statistics were taken when nothing was running
or queued and which now holds thousands of running runs and queued tasks."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from tests.factories import make_agent, make_tenant
from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id

RUNNING, QUEUED, DONE = 2000, 2000, 2000


@pytest.fixture
def busy_database(db_url):
    """Statistics that say nothing runs and nothing waits, then 2,000 running runs and 2,000
    queued tasks: the moment a burst arrives after a quiet hour."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        ids = [new_id() for _ in range(RUNNING + QUEUED + DONE)]
        with conn.cursor().copy("COPY executions (id, tenant_id, agent_id, trigger_type,"
                                " trigger_source, scheduled_for, status, finished_at)"
                                " FROM STDIN") as copy:
            for run_id in ids:
                copy.write_row((run_id, tenant, agent, "run", "api", "2026-12-01T00:00:00Z",
                                "completed", "2026-12-01T00:01:00Z"))
        conn.execute("ANALYZE executions")
        conn.execute("ANALYZE queue_tasks")
        running, queued = ids[:RUNNING], ids[RUNNING:RUNNING + QUEUED]
        # Stale statistics need ended runs made live again, which the terminal-state fence
        # refuses: its trigger is off for this setup only (a superuser's session setting).
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE executions SET status = 'running', finished_at = NULL,"
                     " run_token = gen_random_uuid(), deadline = now() + interval '5 minutes'"
                     " WHERE id = ANY(%s)", (running,))
        conn.execute("UPDATE executions SET status = 'queued', finished_at = NULL"
                     " WHERE id = ANY(%s)", (queued,))
        conn.execute("RESET session_replication_role")
        with conn.cursor().copy("COPY queue_tasks (name, kind, execution_id) FROM STDIN") as copy:
            for run_id in queued:
                copy.write_row((str(run_id), "run", run_id))
        token = conn.execute("SELECT run_token FROM executions WHERE id = %s",
                             (running[0],)).fetchone()[0]
        yield conn, running[0], token


def plan(conn: psycopg.Connection, query: str, params: dict) -> str:
    rows = conn.execute("EXPLAIN (COSTS off) " + QUERIES[query], params).fetchall()
    return "\n".join(row[0] for row in rows)


def test_one_running_run_is_found_by_its_id_not_by_scanning_every_running_run(busy_database):
    conn, run_id, token = busy_database
    batch = json.dumps([{"id": str(run_id), "run_token": str(token), "finish": finish,
                         "status": "completed", "outcome": "done", "reason": None,
                         "usage": None, "events": []} for finish in (True, False)])
    lookups = {
        "insert_journal_batch": {"runs": batch},
        "lock_running_execution": {"execution_id": run_id, "run_token": token},
        "lock_running_execution_for_release": {"execution_id": run_id, "run_token": token},
    }
    for query, params in lookups.items():
        shown = plan(conn, query, params)
        assert "executions_running_deadline_idx" not in shown, (query, shown)
        assert "executions_pkey" in shown, (query, shown)


def test_the_sweep_still_reads_running_runs_by_their_deadline(busy_database):
    conn, _, _ = busy_database
    shown = plan(conn, "lock_timed_out_executions", {"now": None, "limit": 100})
    assert "executions_running_deadline_idx" in shown, shown


def test_a_claim_drops_its_tasks_by_name_whatever_the_backlog(busy_database):
    conn, _, _ = busy_database
    shown = plan(conn, "claim_queued_executions", {"limit": 16, "worker_id": "w",
                                                  "claim_id": new_id(), "tenant_cap": 0})
    assert "Seq Scan on queue_tasks" not in shown, shown
    assert "queue_tasks_pkey" in shown, shown


def test_the_tick_still_finds_a_schedules_unfinished_run_by_its_schedule(busy_database):
    conn, _, _ = busy_database
    shown = plan(conn, "claim_due_schedules", {"now": None, "limit": 100})
    assert "executions_unfinished_idx" in shown, shown


def generic_plan(conn: psycopg.Connection, query: str, types: dict[str, str],
                 values: dict) -> str:
    """The plan Postgres keeps for a prepared statement once it stops planning it afresh (the
    generic plan, forced here), EXPLAINed for these parameter values."""
    text = QUERIES[query]
    for n, name in enumerate(types, 1):
        text = text.replace(f"%({name})s", f"${n}")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    try:
        conn.execute(f"PREPARE generic ({', '.join(types.values())}) AS {text}")
        arguments = ", ".join(sql.Literal(values[name]).as_string(conn) for name in types)
        rows = conn.execute(f"EXPLAIN (COSTS off) EXECUTE generic ({arguments})").fetchall()
        return "\n".join(row[0] for row in rows)
    finally:
        conn.execute("DEALLOCATE ALL")
        conn.execute("RESET plan_cache_mode")


def test_the_claims_generic_plan_reaches_every_table_by_key(busy_database):
    conn, _, _ = busy_database
    shown = generic_plan(conn, "claim_queued_executions",
                         {"limit": "integer", "worker_id": "text", "claim_id": "uuid",
                          "tenant_cap": "integer"},
                         {"limit": 16, "worker_id": "w", "claim_id": new_id(), "tenant_cap": 0})
    assert "Seq Scan" not in shown, shown
    assert "executions_pkey" in shown and "queue_tasks_pkey" in shown, shown
    assert "queue_tasks_ready_idx" in shown and "queue_tasks_leased_idx" in shown, shown
