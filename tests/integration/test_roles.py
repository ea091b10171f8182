"""Least-privilege roles (sql/grants.sql): each process works with only its grants, and the
worker's role cannot do what it has no business doing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from scheduler.api.app import create_app, stop_hub
from scheduler.tick import run_tick
from sql.db import open_pool
from sql.migrate import apply_grants
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, scalar, until

ROLES = ("tickwork_scheduler", "tickwork_worker", "tickwork_api")


@pytest.fixture
def granted(db_url, pg_server_url):
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for role in ROLES:  # roles are cluster-wide; create them once, as an operator would
            conn.execute(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                         f"'{role}') THEN CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB "
                         f"NOCREATEROLE NOREPLICATION; END IF; END$$")
    apply_grants(db_url)
    return {role: make_conninfo(db_url, user=role) for role in ROLES}


@pytest.mark.parametrize("statement", [
    "CREATE TABLE evil (id int)",
    "DROP TABLE executions",
    "TRUNCATE run_events",
    "DELETE FROM run_events",
    "UPDATE schedules SET next_run = now()",
    "SELECT * FROM api_tokens",
    "ALTER ROLE tickwork_worker SUPERUSER",
    "SET ROLE tickwork_api",
    "SELECT pg_read_file('/etc/passwd')",
    "COPY executions TO PROGRAM 'true'",
])
def test_the_worker_role_is_refused_what_it_has_no_business_doing(granted, statement):
    with psycopg.connect(granted["tickwork_worker"], autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def test_the_api_role_cannot_claim_runs_or_touch_run_state(granted):
    # (It can write the journal: POST /v1/tick runs the sweep, whose verdict journals the
    # terminal event of a timed-out run.)
    with psycopg.connect(granted["tickwork_api"], autocommit=True) as conn:
        for statement in ("INSERT INTO execution_claims (execution_id, worker_id)"
                          " VALUES (gen_random_uuid(), 'x')",
                          "UPDATE execution_claims SET worker_id = 'x'",
                          "INSERT INTO run_states (execution_id, version, state)"
                          " VALUES (gen_random_uuid(), 1, '{}')",
                          "SELECT * FROM tool_call_results"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


async def test_api_scheduler_and_worker_do_their_whole_job_with_their_own_grants(granted, settings, tokens, db_url):
    api_pool = await open_pool(granted["tickwork_api"], application_name="tickwork-api")
    worker_pool = await open_pool(granted["tickwork_worker"], application_name="tickwork-worker")
    scheduler_pool = await open_pool(granted["tickwork_scheduler"], application_name="tickwork-scheduler")
    app = create_app(settings, pool=api_pool)
    headers = {"Authorization": f"Bearer {tokens['acme']}"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), headers=headers,
                                     base_url="http://api.test") as api:
            agent = (await api.post("/v1/agents", json={
                "name": "least", "tools": ["demo.get_record", "demo.list_records", "query_file",
                                           "demo.send_message"]})).json()
            schedule = (await api.post("/v1/schedules", json={
                "agent_id": agent["id"], "cron": "* * * * *", "input": {"script": [
                    {"tool_calls": [{"name": "demo.list_records", "arguments": {"limit": 500}}]},
                    {"tool_calls": [{"name": "demo.send_message",
                                     "arguments": {"recipient": "ops", "text": "hi"}}]},
                    {"text": "Sent."}]}})).json()
            tick_at = datetime.now(timezone.utc) + timedelta(minutes=2)
            outcome = await run_tick(scheduler_pool, settings, now=tick_at)
            assert outcome.ok and outcome.dispatch.created == 1
            run_id = scalar(db_url, "SELECT id::text FROM executions")
            async with running_worker(worker_pool, db_url):
                await until(db_url, "SELECT breadcrumb = 'suspended' FROM executions")
            approval = (await api.get("/v1/approvals")).json()["items"][0]
            assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
            async with running_worker(worker_pool, db_url):
                await until(db_url, "SELECT status = 'completed' AND breadcrumb IS NULL FROM executions")
            journal = await events(api, run_id)
            assert journal[-1]["type"] == "run_complete"
            assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
            assert (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).status_code == 202
            manual = (await api.get("/v1/runs", params={"status": "queued"})).json()["items"][0]
            assert (await api.post(f"/v1/runs/{manual['id']}/cancel")).status_code == 202
            operator = {"Authorization": f"Bearer {tokens['operator']}"}
            tick = await api.post("/v1/tick", json={"at": "2026-01-01T00:00:00Z"},
                                  headers=operator)
            assert tick.status_code == 200 and tick.json()["ok"] is True
            assert (await api.get("/metrics", headers=operator)).status_code == 200
            swept = await run_tick(scheduler_pool, settings, now=tick_at + timedelta(days=400))
            assert swept.ok and swept.retention_deleted >= 1
    finally:
        await stop_hub(app)
        for pool in (api_pool, worker_pool, scheduler_pool):
            await pool.close()
