"""Test data, made one way for the whole suite: rows written straight to the database (tests may
hold SQL; the app keeps it in sql/), and agents, schedules and runs created through the API."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from tickwork.sql.ids import new_id

# The tools a scripted worker run may call (the demo records and the local tools).
DEMO_TOOLS = ["demo.get_record", "demo.list_records", "demo.search_records", "query_file",
              "read_file", "update_plan"]


# --- straight to the database ------------------------------------------------------------------

def make_tenant(conn: psycopg.Connection, name: str | None = None) -> UUID:
    tenant_id = new_id()
    conn.execute("INSERT INTO tenants (id, name) VALUES (%s, %s)",
                  (tenant_id, name or f"tenant-{tenant_id.hex[-12:]}"))
    return tenant_id


def make_agent(conn: psycopg.Connection, tenant_id: UUID, name: str = "reporter",
               status: str = "active") -> UUID:
    agent_id = new_id()
    conn.execute("INSERT INTO agents (id, tenant_id, name, status) VALUES (%s, %s, %s, %s)",
                 (agent_id, tenant_id, name, status))
    return agent_id


def make_webhook(conn: psycopg.Connection, tenant_id: UUID, events: list[str], *,
                 url: str = "https://example.com/hook", secret: str = "s") -> UUID:
    webhook_id = new_id()
    conn.execute("INSERT INTO webhooks (id, tenant_id, url, events, secret)"
                 " VALUES (%s, %s, %s, %s, %s)", (webhook_id, tenant_id, url, events, secret))
    return webhook_id


def queue_runs_at_once(db_url: str, agent_id: str | UUID, runs: int, *,
                       age: str = "0 seconds",
                       script: list | None = None) -> list[UUID]:
    """``runs`` scripted runs of the agent queued at one commit (as a burst of fires would
    be), available ``age`` ago, each with ``script`` (one turn answering "ok" when not given);
    their ids."""
    run_input = Jsonb({"script": script if script is not None else [{"text": "ok"}]})
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute(
            "WITH made AS (INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
            " trigger_source, scheduled_for, input)"
            " SELECT gen_random_uuid(), a.tenant_id, a.id, 'run', 'api', now(),"
            " %s FROM agents a, generate_series(1, %s)"
            " WHERE a.id = %s RETURNING id)"
            " INSERT INTO queue_tasks (name, kind, execution_id, available_at)"
            " SELECT id::text, 'run', id, now() - %s::interval FROM made RETURNING execution_id",
            (run_input, runs, agent_id, age)).fetchall()
    return [row[0] for row in rows]


def make_schedules(conn: psycopg.Connection, tenant_id: UUID, agent_id: UUID,
                   specs: Iterable[tuple[str, datetime]], *, overlap: str = "allow",
                   timeout_minutes: int = 5, max_attempts: int = 3) -> list[UUID]:
    """Insert schedules from (cron, next_run) pairs; crons must be distinct per agent."""
    rows = [(new_id(), tenant_id, agent_id, cron, next_run, overlap, timeout_minutes,
             max_attempts) for cron, next_run in specs]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO schedules (id, tenant_id, agent_id, cron, next_run, overlap,"
            " timeout_minutes, max_attempts) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows)
    return [row[0] for row in rows]


def many_agents(conn: psycopg.Connection, tenant_id: UUID, count: int) -> list[UUID]:
    ids = [new_id() for _ in range(count)]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO agents (id, tenant_id, name) VALUES (%s, %s, %s)",
                        [(i, tenant_id, f"agent-{n}") for n, i in enumerate(ids)])
    return ids


def count(conn: psycopg.Connection, sql: str, params: tuple = ()) -> int:
    return conn.execute(sql, params).fetchone()[0]


# --- through the API (an httpx client of the app, as the `api` fixture gives) ------------------

async def create_agent(api, name: str = "reporter", *, headers: dict | None = None,
                       **fields) -> dict:
    """POST /v1/agents with exactly these fields (as the api's tenant, or as headers say); the
    created agent."""
    response = await api.post("/v1/agents", json={"name": name, **fields}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def scripted_agent(api, tools: Iterable[str] = DEMO_TOOLS, name: str = "worker-agent",
                         **fields) -> str:
    """An agent for scripted worker runs (it answers from the demo records); its id."""
    created = await create_agent(api, name, tools=list(tools),
                                 instructions="Answer from the records.", **fields)
    return created["id"]


async def create_schedule(api, agent_id: str, cron: str = "0 9 * * *", **fields) -> dict:
    """POST /v1/schedules; the created schedule."""
    response = await api.post("/v1/schedules", json={"agent_id": agent_id, "cron": cron, **fields})
    assert response.status_code == 201, response.text
    return response.json()


async def queue_run(api, agent_id: str, run_input: dict | None = None, *,
                    headers: dict | None = None, **fields) -> str:
    """POST /v1/agents/{id}/runs; the queued run's id."""
    response = await api.post(f"/v1/agents/{agent_id}/runs",
                              json={"input": run_input or {}, **fields}, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()["id"]
