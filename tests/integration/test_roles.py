"""Least-privilege roles (sql/grants.sql): each process works with only its grants, each role
is refused (42501) what it has no business doing, and the narrow definer functions of migration
0029 do only their one thing."""

from __future__ import annotations

import dataclasses
import secrets
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.scheduler.tick import run_tick
from tickwork.sql.db import open_pool
from tickwork.sql.migrate import apply_grants
from tickwork.sql.ids import new_id
from tests.factories import make_agent, make_tenant
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, scalar, until

ROLES = ("tickwork_scheduler", "tickwork_worker", "tickwork_api")


# The roles' password, given when this session creates them. The suite's embedded Postgres asks
# every connection for a password (scram-sha-256), so a role made without one could never log
# in there; a server that trusts its clients (the machine's) ignores it. A role that exists
# already is left as its operator made it.
ROLE_PASSWORD = secrets.token_urlsafe(16)


@pytest.fixture
def granted(db_url, pg_server_url):
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for role in ROLES:  # roles are cluster-wide; create them once, as an operator would
            conn.execute(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                         f"'{role}') THEN CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB "
                         f"NOCREATEROLE NOREPLICATION PASSWORD '{ROLE_PASSWORD}'; END IF; END$$")
    apply_grants(db_url)
    return {role: make_conninfo(db_url, user=role, password=ROLE_PASSWORD) for role in ROLES}


A_UUID = "'00000000-0000-0000-0000-000000000001'"
FORBIDDEN = {
    "tickwork_worker": [
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
        # A run's own columns only: never whose run it is.
        "UPDATE executions SET tenant_id = tenant_id",
        "UPDATE executions SET agent_id = agent_id",
        "UPDATE executions SET schedule_id = NULL",
        "UPDATE executions SET input = '{}'",
        "UPDATE executions SET cancel_requested_at = NULL",
        "INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
        f" scheduled_for, status) VALUES ({A_UUID}, {A_UUID}, {A_UUID}, 'run', 'api', now(),"
        " 'completed')",
        # RELIABILITY S4: only the dispatcher and the sweep mint executions; a worker's retries
        # go through fail_and_retry_executions (0041).
        "INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
        f" scheduled_for) VALUES ({A_UUID}, {A_UUID}, {A_UUID}, 'schedule', 'tick', now())",
        # ... and the worker may not pick the sweep's clock for that door.
        f"SELECT * FROM fail_and_retry_executions(ARRAY[{A_UUID}::uuid], false, NULL,"
        " '2999-01-01')",
        "DELETE FROM executions",
        "DELETE FROM schedules",
        "DELETE FROM agents",
        "DELETE FROM tool_catalog",
        "UPDATE tool_catalog SET key = key",
        "UPDATE approvals SET status = 'approved'",
        "SELECT manage_journal_partitions(now(), 1, 1)",
        "SELECT retention_upkeep(30, 1)",
    ],
    "tickwork_api": [
        "INSERT INTO execution_claims (execution_id, worker_id) VALUES (gen_random_uuid(), 'x')",
        "UPDATE execution_claims SET worker_id = 'x'",
        "INSERT INTO run_states (execution_id, version, state) VALUES (gen_random_uuid(), 1, '{}')",
        "SELECT * FROM tool_call_results",
        "SELECT state FROM run_states",
        # The journal is read-only to the API, and partitions are not its business.
        f"INSERT INTO run_events (execution_id, seq, type) VALUES ({A_UUID}, 1, 'run_start')",
        "UPDATE run_events SET payload = '{}'",
        "DELETE FROM run_events",
        "TRUNCATE run_events",
        "DROP TABLE run_events_default",
        "SELECT manage_journal_partitions('2999-01-01', 1, 1)",
        "SET ROLE tickwork_scheduler",
        "DELETE FROM executions",
        "DELETE FROM tool_results",
        "UPDATE executions SET tenant_id = tenant_id",
        "UPDATE executions SET run_token = NULL",
        "UPDATE agents SET tenant_id = tenant_id",
        "UPDATE schedules SET tenant_id = tenant_id",
        "UPDATE schedules SET agent_id = agent_id",
        "UPDATE approvals SET arguments = '{}'",
        "UPDATE approvals SET execution_id = execution_id",
        "CREATE TABLE evil (id int)",
    ],
    "tickwork_scheduler": [
        f"INSERT INTO run_events (execution_id, seq, type) VALUES ({A_UUID}, 1, 'run_start')",
        "UPDATE executions SET tenant_id = tenant_id",
        "UPDATE executions SET usage = NULL",
        "UPDATE schedules SET input = '{}'",
        "UPDATE schedules SET tenant_id = tenant_id",
        "SELECT * FROM api_tokens",
        "SELECT * FROM run_states",
        "DELETE FROM agents",
        "UPDATE approvals SET status = 'approved'",
        "SET ROLE tickwork_worker",
    ],
}


@pytest.mark.parametrize(("role", "statement"), [
    (role, statement) for role, statements in FORBIDDEN.items() for statement in statements])
def test_each_role_is_refused_what_it_has_no_business_doing(granted, role, statement):
    with psycopg.connect(granted[role], autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def test_the_roles_own_nothing_and_cannot_pass_row_security(granted, db_url):
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT rolname, rolsuper, rolbypassrls, rolcreaterole, rolcreatedb"
                            " FROM pg_roles WHERE rolname = ANY(%s)", (list(ROLES),)).fetchall()
        assert rows and all(not any(flags) for _, *flags in rows)
        owned = conn.execute("SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner"
                             " WHERE r.rolname = ANY(%s)", (list(ROLES),)).fetchone()[0]
        assert owned == 0


def test_the_worker_role_publishes_its_tools_but_cannot_rename_or_drop_them(granted, db_url):
    from tickwork.worker.tools.publish import publish_catalog
    from tickwork.worker.tools.registry import catalog

    specs = catalog()
    added = dataclasses.replace(specs[0], key="demo.newer_tool", description="shipped later")
    assert publish_catalog(granted["tickwork_worker"], [*specs, added]) == len(specs) + 1
    assert scalar(db_url, "SELECT count(*) FROM tool_catalog") == len(specs) + 1
    assert scalar(db_url, "SELECT description FROM tool_catalog WHERE key = 'demo.newer_tool'") \
        == "shipped later"


def test_the_api_roles_retention_door_keeps_at_least_a_week(granted):
    with psycopg.connect(granted["tickwork_api"], autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="at least 7 days"):
            conn.execute("SELECT retention_upkeep(1, 1000)")
        assert conn.execute("SELECT retention_upkeep(7, 1000)").fetchone()[0] == 0


def test_the_journal_door_adds_only_a_finished_runs_one_terminal_event(granted, db_url):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        ids = {}
        for status in ("running", "failed"):
            ids[status] = new_id()
            conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                         " trigger_source, scheduled_for, status) VALUES"
                         " (%s, %s, %s, 'run', 'api', now(), %s)",
                         (ids[status], tenant, agent, status))
    with psycopg.connect(granted["tickwork_api"], autocommit=True) as conn:
        add = "SELECT journal_run_complete(%s, '{\"by\": \"x\"}')"
        assert conn.execute(add, (ids["running"],)).fetchone()[0] == 0
        assert conn.execute(add, (ids["failed"],)).fetchone()[0] == 1
        assert conn.execute(add, (ids["failed"],)).fetchone()[0] == 0
    assert scalar(db_url, "SELECT count(*) FROM run_events") == 1


def test_the_worker_mints_retries_only_of_its_due_or_fenced_runs_through_the_door(granted,
                                                                                   db_url):
    token = new_id()
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        ids = {}
        for name, minutes in (("due", -1), ("not_due", 10), ("fenced", 10)):
            ids[name] = new_id()
            conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                         " trigger_source, scheduled_for, status, started_at, deadline,"
                         " run_token) VALUES (%s, %s, %s, 'run', 'api', now(), 'running', now(),"
                         " now() + make_interval(mins => %s), %s)",
                         (ids[name], tenant, agent, minutes, token))
    door = "SELECT failed_id, retry_id FROM fail_and_retry_executions(%s::uuid[], %s, %s)"
    with psycopg.connect(granted["tickwork_worker"], autocommit=True) as conn:
        timed_out = conn.execute(door, ([ids["due"], ids["not_due"]], False, None)).fetchall()
        assert [row[0] for row in timed_out] == [ids["due"]] and timed_out[0][1] is not None
        assert conn.execute(door, ([ids["fenced"]], True, new_id())).fetchall() == []
        released = conn.execute(door, ([ids["fenced"]], True, token)).fetchall()
        assert [row[0] for row in released] == [ids["fenced"]]
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE retry_of IS NOT NULL") == 2
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE kind = 'run'") == 2
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s",
                  (ids["not_due"],)) == "running"


def test_the_worker_removes_schedules_only_of_an_agent_that_is_gone(granted, db_url):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        kept, gone = make_agent(conn, tenant, "kept"), make_agent(conn, tenant, "gone")
        for agent in (kept, gone):
            conn.execute("INSERT INTO schedules (id, tenant_id, agent_id, cron, next_run)"
                         " VALUES (%s, %s, %s, '0 9 * * *', now())", (new_id(), tenant, agent))
        conn.execute("ALTER TABLE schedules DROP CONSTRAINT schedules_agent_id_fkey")
        conn.execute("DELETE FROM agents WHERE id = %s", (gone,))
    with psycopg.connect(granted["tickwork_worker"], autocommit=True) as conn:
        remove = "SELECT remove_schedules_of_missing_agent(%s)"
        assert conn.execute(remove, (kept,)).fetchone()[0] == 0
        assert conn.execute(remove, (gone,)).fetchone()[0] == 1
    assert scalar(db_url, "SELECT count(*) FROM schedules") == 1


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
            # Updates under the API's column grants (and row security): agent and schedule.
            assert (await api.put(f"/v1/agents/{agent['id']}", json={
                "name": "least", "instructions": "be brief", "tools": agent["tools"]})
                    ).status_code == 200
            assert (await api.patch(f"/v1/schedules/{schedule['id']}",
                                    json={"timeout_minutes": 6})).json()["timeout_minutes"] == 6
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
            # A second run waits for approval and is cancelled by a person: the API journals
            # its terminal event through journal_run_complete.
            waiting = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()["id"]
            async with running_worker(worker_pool, db_url):
                await until(db_url, "SELECT breadcrumb = 'suspended' FROM executions"
                                    " WHERE id = %s", (waiting,))
            assert (await api.post(f"/v1/runs/{waiting}/cancel")).status_code == 202
            last = (await events(api, waiting))[-1]
            assert (last["type"], last["payload"]["by"]) == ("run_complete", "person")
            assert (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).status_code == 202
            manual = (await api.get("/v1/runs", params={"status": "queued"})).json()["items"][0]
            assert (await api.post(f"/v1/runs/{manual['id']}/cancel")).status_code == 202
            # The HTTP tick (the API's role) sweeps a run past its deadline: failed, journaled,
            # retried, and its retention runs through retention_upkeep.
            with psycopg.connect(db_url) as conn:
                stale = conn.execute(
                    "INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
                    " scheduled_for, status, started_at, deadline)"
                    " SELECT %s, tenant_id, agent_id, 'run', 'api', now(), 'running', now(),"
                    " now() - interval '1 minute' FROM executions LIMIT 1 RETURNING id",
                    (new_id(),)).fetchone()[0]
            operator = {"Authorization": f"Bearer {tokens['operator']}"}
            tick = await api.post("/v1/tick", json={"at": "2026-01-01T00:00:00Z"},
                                  headers=operator)
            assert tick.status_code == 200 and tick.json()["ok"] is True
            tick = await api.post("/v1/tick", headers=operator)
            assert tick.json()["ok"] is True and tick.json()["sweep"] == {"failed": 1, "retried": 1}
            last = (await events(api, str(stale)))[-1]
            assert (last["type"], last["payload"]["by"]) == ("run_complete", "sweep")
            assert (await api.get("/metrics", headers=operator)).status_code == 200
            swept = await run_tick(scheduler_pool, settings, now=tick_at + timedelta(days=400))
            assert swept.ok and swept.retention_deleted >= 1
    finally:
        await stop_hub(app)
        for pool in (api_pool, worker_pool, scheduler_pool):
            await pool.close()
