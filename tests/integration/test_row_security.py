"""Row-level security (migration 0031, policies in sql/grants.sql): a second wall behind the
queries' tenant filters. As the API's role, a query that forgets its tenant filter still sees
one tenant's rows (RELIABILITY S2's planted bug); with no tenant set it sees nothing."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.scheduler.api.tenant_scope import TenantConnection
from tickwork.sql import QUERIES
from tickwork.sql.db import connect, open_pool
from tickwork.sql.ids import new_id
from tests.factories import make_agent, make_tenant, make_webhook
from tests.integration.test_roles import granted  # noqa: F401  (the fixture)

WALLED = ("agents", "schedules", "executions", "approvals", "skipped_fires", "webhooks")


def plant(conn: psycopg.Connection, tenant) -> None:
    """One row of each walled table for the tenant."""
    schedule, run = new_id(), new_id()
    agent = make_agent(conn, tenant, f"agent-{run.hex[-12:]}")
    conn.execute("INSERT INTO schedules (id, tenant_id, agent_id, cron, next_run)"
                 " VALUES (%s, %s, %s, '0 9 * * *', now())", (schedule, tenant, agent))
    conn.execute("INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type,"
                 " trigger_source, scheduled_for) VALUES (%s, %s, %s, %s, 'run', 'api', now())",
                 (run, tenant, agent, schedule))
    conn.execute("INSERT INTO approvals (id, tenant_id, execution_id, tool_call_id, tool)"
                 " VALUES (%s, %s, %s, 'call-1', 'demo.send_message')",
                 (str(new_id()), tenant, run))
    conn.execute("INSERT INTO skipped_fires (schedule_id, scheduled_for, tenant_id, reason)"
                 " VALUES (%s, now(), %s, 'overlap')", (schedule, tenant))
    make_webhook(conn, tenant, ["run.failed"], url="https://example.invalid/hook")


@pytest.fixture
def two_tenants(db_url):
    with psycopg.connect(db_url) as conn:
        a, b = make_tenant(conn, "row-a"), make_tenant(conn, "row-b")
        plant(conn, a)
        plant(conn, b)
        plant(conn, b)
    return a, b


def tenants_seen(conn: psycopg.Connection, table: str) -> list:
    return [row[0] for row in conn.execute(f"SELECT tenant_id FROM {table}")]  # no filter


def test_a_query_without_a_tenant_filter_sees_only_the_scoped_tenants_rows(granted, two_tenants):  # noqa: F811
    a, b = two_tenants
    with psycopg.connect(granted["tickwork_api"]) as conn:
        with conn.transaction():
            conn.execute(QUERIES["set_tenant_scope"], {"tenant_id": a})
            for table in WALLED:
                assert tenants_seen(conn, table) == [a], table
        with conn.transaction():
            conn.execute(QUERIES["set_tenant_scope"], {"tenant_id": b})
            assert tenants_seen(conn, "executions") == [b, b]
        # The key was transaction-local: the next transaction, and one with no key, see nothing.
        with conn.transaction():
            for table in WALLED:
                assert tenants_seen(conn, table) == [], table


def test_writes_outside_the_scoped_tenant_change_nothing_or_are_refused(granted, two_tenants, db_url):  # noqa: F811
    a, b = two_tenants
    with psycopg.connect(granted["tickwork_api"]) as conn:
        with conn.transaction():
            conn.execute(QUERIES["set_tenant_scope"], {"tenant_id": a})
            assert conn.execute("UPDATE agents SET name = 'renamed'").rowcount == 1
            assert conn.execute("DELETE FROM schedules").rowcount == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            with conn.transaction():
                conn.execute(QUERIES["set_tenant_scope"], {"tenant_id": a})
                conn.execute("INSERT INTO agents (id, tenant_id, name) VALUES (%s, %s, 'x')",
                             (new_id(), b))
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM agents WHERE tenant_id = %s AND name = 'renamed'",
                            (b,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM schedules WHERE tenant_id = %s",
                            (b,)).fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 3


def test_the_scheduler_and_worker_roles_work_across_tenants(granted, two_tenants):  # noqa: F811
    for role in ("tickwork_scheduler", "tickwork_worker"):
        with psycopg.connect(granted[role]) as conn:
            assert len(tenants_seen(conn, "executions")) == 3, role
            assert len(tenants_seen(conn, "agents")) == 3, role


async def test_the_api_connection_of_a_request_is_scoped_to_its_tenant(granted, two_tenants):  # noqa: F811
    a, _ = two_tenants
    conn = await connect(granted["tickwork_api"], application_name="tickwork-test")
    try:
        scoped = TenantConnection(conn, a)
        rows = await (await scoped.execute("SELECT tenant_id FROM executions")).fetchall()
        assert [row["tenant_id"] for row in rows] == [a]
        async with scoped.transaction():
            rows = await (await scoped.execute("SELECT tenant_id FROM agents")).fetchall()
            assert [row["tenant_id"] for row in rows] == [a]
        # The bare connection, outside those transactions, sees nothing.
        assert await (await conn.execute("SELECT * FROM executions")).fetchall() == []
    finally:
        await conn.close()


@pytest.mark.parametrize("role", ["tickwork_api", "owner"])
async def test_a_planted_bug_in_a_route_still_shows_only_the_tenants_runs(
        granted, role, settings, tokens, db_url, monkeypatch):  # noqa: F811
    """GET /v1/runs and GET /v1/runs/{id} with their tenant filter removed: on the API's role
    the wall holds (only acme's runs, another tenant's run is a 404); on the owner, which
    row-level security does not bind, the same bug leaks (so this test can fail)."""
    url = granted["tickwork_api"] if role == "tickwork_api" else db_url
    pool = await open_pool(url, application_name="tickwork-api")
    app = create_app(settings, pool=pool)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://api.test") as api:
            runs = {}
            for tenant in ("acme", "globex"):
                headers = {"Authorization": f"Bearer {tokens[tenant]}"}
                agent = (await api.post("/v1/agents", json={"name": "wall"},
                                        headers=headers)).json()
                made = await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}},
                                      headers=headers)
                assert made.status_code == 202, made.text
                runs[tenant] = made.json()["id"]
            monkeypatch.setitem(QUERIES, "list_executions", QUERIES["list_executions"].replace(
                "WHERE tenant_id = %(tenant_id)s", "WHERE %(tenant_id)s::uuid IS NOT NULL"))
            monkeypatch.setitem(QUERIES, "get_execution", QUERIES["get_execution"].replace(
                "AND tenant_id = %(tenant_id)s", "AND %(tenant_id)s::uuid IS NOT NULL"))
            acme = {"Authorization": f"Bearer {tokens['acme']}"}
            listed = {run["id"] for run in (await api.get("/v1/runs", headers=acme)).json()["items"]}
            other = await api.get(f"/v1/runs/{runs['globex']}", headers=acme)
            if role == "tickwork_api":
                assert listed == {runs["acme"]}
                assert other.status_code == 404
            else:
                assert listed == {runs["acme"], runs["globex"]}
                assert other.status_code == 200
    finally:
        await stop_hub(app)
        await pool.close()
