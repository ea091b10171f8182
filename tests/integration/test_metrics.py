"""GET /metrics: Prometheus text with the tick's timings and gauges read from the database at
scrape time (runs, queue, approvals, the last hour's refusals and verdicts, SSE tails, the
oldest open transaction). Data is written through the API where it can be, else with SQL."""

from __future__ import annotations

import asyncio
from uuid import UUID

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from tickwork.scheduler.api.app import create_app
from tickwork.sql.db import connect
from tickwork.sql.ids import new_id
from tickwork.sql.presence import hold_presence

DB_GAUGES = ["tickwork_queue_depth", "tickwork_queue_oldest_age_seconds",
             "tickwork_approvals_pending", "tickwork_due_lag_seconds_max",
             "tickwork_oldest_transaction_age_seconds", "tickwork_workers_present",
             "tickwork_sse_subscribers"]


# --- helpers ---------------------------------------------------------------------------------

def as_operator(client: httpx.AsyncClient) -> dict[str, str]:
    """/metrics spans tenants: it takes the cluster operator's token, not a tenant's."""
    return {"Authorization": f"Bearer {client.tokens['operator']}"}


async def scrape(client: httpx.AsyncClient) -> dict[str, dict[tuple, float]]:
    """family name -> {((label, value), ...) of one sample: value}, for every sample whose name
    is the family's (histogram buckets and sums are left out)."""
    response = await client.get("/metrics", headers=as_operator(client))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    families: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        samples = families.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name in (family.name, f"{family.name}_total"):
                samples[tuple(sorted(sample.labels.items()))] = sample.value
    return families


def gauge(families: dict, name: str) -> float:
    return families[name][()]


def by_label(families: dict, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for labels, value in families[name].items()}


async def execute(db_url: str, query: str, params: tuple | dict = ()) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute(query, params)


async def tenant_id(db_url: str, name: str) -> UUID:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT id FROM tenants WHERE name = %s", (name,))
        return (await cursor.fetchone())[0]


async def insert_execution(db_url: str, tenant: UUID, agent: UUID, *, source: str,
                           created_ago: str, lag: str, status: str = "completed",
                           outcome: str | None = "done", retry_of: UUID | None = None) -> UUID:
    """An execution created ``created_ago`` before now, ``lag`` after the fire it stands for."""
    execution_id = new_id()
    await execute(db_url, """
        INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,
                                scheduled_for, created_at, status, outcome, retry_of, attempt)
        VALUES (%(id)s, %(tenant)s, %(agent)s, 'schedule', %(source)s,
                now() - %(created_ago)s::interval - %(lag)s::interval,
                now() - %(created_ago)s::interval, %(status)s, %(outcome)s, %(retry_of)s,
                CASE WHEN %(retry_of)s::uuid IS NULL THEN 1 ELSE 2 END)""",
                  {"id": execution_id, "tenant": tenant, "agent": agent, "source": source,
                   "created_ago": created_ago, "lag": lag, "status": status,
                   "outcome": outcome, "retry_of": retry_of})
    return execution_id


async def journal(db_url: str, execution_id: UUID, events: list[tuple[str, dict, str]]) -> None:
    """Append (type, payload, age) events to one run's journal, numbered from 1."""
    for seq, (kind, payload, age) in enumerate(events, start=1):
        await execute(db_url, "INSERT INTO run_events (execution_id, seq, type, payload, ts)"
                              " VALUES (%s, %s, %s, %s::jsonb, now() - %s::interval)",
                      (execution_id, seq, kind, psycopg.types.json.Jsonb(payload), age))


async def insert_approval(db_url: str, tenant: UUID, execution_id: UUID, call: str,
                          status: str) -> None:
    await execute(db_url, "INSERT INTO approvals (id, tenant_id, execution_id, tool_call_id, tool,"
                          " status) VALUES (%s, %s, %s, %s, 'demo.send_message', %s)",
                  (f"{execution_id}:{call}", tenant, execution_id, call, status))


# --- tests -----------------------------------------------------------------------------------

async def test_metrics_need_a_token(api):
    assert (await api.get("/metrics", headers={"Authorization": ""})).status_code == 401
    wrong = await api.get("/metrics", headers={"Authorization": "Bearer not-a-token"})
    assert wrong.status_code == 401
    assert set(wrong.json()) >= {"error", "message"}


async def test_an_empty_deployment_reports_zero_for_every_gauge(api):
    families = await scrape(api)
    for name in DB_GAUGES:
        assert gauge(families, name) == 0, name
    assert families["tickwork_executions"] == {}
    assert families["tickwork_wall_refusals"] == {}
    assert families["tickwork_gate_verdicts"] == {}
    # The tick's own metrics (default registry) are still there.
    assert "tickwork_tick_duration_seconds" in families
    assert "tickwork_tick_failures" in families


async def test_a_tick_is_observed_in_the_tick_duration_histogram(api):
    before = await api.get("/metrics", headers=as_operator(api))
    count = next(s.value for f in text_string_to_metric_families(before.text)
                 for s in f.samples if s.name == "tickwork_tick_duration_seconds_count")
    assert (await api.post("/v1/tick", headers=as_operator(api))).status_code == 200
    after = await api.get("/metrics", headers=as_operator(api))
    assert next(s.value for f in text_string_to_metric_families(after.text)
                for s in f.samples if s.name == "tickwork_tick_duration_seconds_count") == count + 1


async def test_runs_queue_approvals_and_journal_are_counted_from_the_database(api, db_url):
    agent = (await api.post("/v1/agents", json={"name": "reporter"})).json()
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"],
                                                      "cron": "0 9 * * *"})).json()
    run = (await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}})).json()
    manual = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()
    acme, globex = await tenant_id(db_url, "acme"), await tenant_id(db_url, "globex")
    agent_id = UUID(agent["id"])

    # Cron fires: the newest lag 42.5 s behind; older, retried and manual runs do not count.
    late = await insert_execution(db_url, acme, agent_id, source="cron", created_ago="1 minute",
                                  lag="42.5 seconds")
    await insert_execution(db_url, acme, agent_id, source="cron", created_ago="2 minutes",
                           lag="3 seconds", status="failed", outcome="timed_out")
    old = await insert_execution(db_url, acme, agent_id, source="cron", created_ago="10 minutes",
                                 lag="1000 seconds", status="failed", outcome="timed_out")
    await insert_execution(db_url, acme, agent_id, source="cron", created_ago="30 seconds",
                           lag="2000 seconds", status="running", outcome=None, retry_of=old)
    await insert_execution(db_url, globex, new_id(), source="manual", created_ago="1 second",
                           lag="3000 seconds", status="completed", outcome="question")

    # Queue: the two runs above queued two tasks; one is leased by a worker, the other has
    # waited 90 s.
    await execute(db_url, "UPDATE queue_tasks SET lease_expires_at = now() + interval '1 minute'"
                          " WHERE name = %s", (manual["id"],))
    await execute(db_url, "UPDATE queue_tasks SET available_at = now() - interval '90 seconds'"
                          " WHERE name = %s", (run["id"],))

    # Approvals of both tenants: pending ones count, decided ones do not.
    await insert_approval(db_url, acme, late, "call-1", "pending")
    await insert_approval(db_url, acme, late, "call-2", "approved")
    await insert_approval(db_url, globex, old, "call-3", "pending")
    await insert_approval(db_url, globex, old, "call-4", "rejected")

    # The journal: refusals and verdicts of the last hour, by wall and by verdict.
    await journal(db_url, late, [
        ("run_start", {}, "5 minutes"),
        ("budget_refusal", {"tool": "demo.get_record", "wall": "per_tool"}, "4 minutes"),
        ("budget_refusal", {"tool": "demo.get_record", "wall": "per_tool"}, "4 minutes"),
        ("budget_refusal", {"tool": "demo.send_message", "wall": "delivery"}, "3 minutes"),
        ("gate_decision", {"verdict": "stalled", "reason": "x"}, "2 minutes"),
        ("gate_decision", {"verdict": "done", "reason": "y"}, "1 minute"),
        ("run_complete", {"status": "completed"}, "1 minute"),
    ])
    await journal(db_url, old, [
        ("budget_refusal", {"tool": "demo.get_record", "wall": "per_tool"}, "59 minutes"),
        ("gate_decision", {"verdict": "stalled", "reason": "z"}, "30 minutes"),
        ("budget_refusal", {"tool": "demo.get_record", "wall": "aggregate"}, "61 minutes"),
        ("gate_decision", {"verdict": "done", "reason": "too old"}, "2 hours"),
    ])

    families = await scrape(api)

    assert {(dict(k)["status"], dict(k)["outcome"]): v
            for k, v in families["tickwork_executions"].items()} == {
        ("queued", "none"): 2, ("completed", "done"): 1, ("failed", "timed_out"): 2,
        ("running", "none"): 1, ("completed", "question"): 1}
    assert gauge(families, "tickwork_due_lag_seconds_max") == 42.5
    assert gauge(families, "tickwork_queue_depth") == 1
    assert 90 <= gauge(families, "tickwork_queue_oldest_age_seconds") < 120
    assert gauge(families, "tickwork_approvals_pending") == 2
    assert by_label(families, "tickwork_wall_refusals", "wall") == {"per_tool": 3, "delivery": 1}
    assert by_label(families, "tickwork_gate_verdicts", "verdict") == {"stalled": 2, "done": 1}


async def test_the_oldest_open_transaction_is_reported(api, db_url):
    # The age the gauge reports lies between two readings of the same age taken just before and
    # just after the scrape (each on its own statement's clock): no waiting for it to grow.
    oldest = ("SELECT extract(epoch FROM now() - min(xact_start)) FROM pg_stat_activity"
              " WHERE datname = current_database() AND backend_type = 'client backend'"
              " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")
    async with await psycopg.AsyncConnection.connect(db_url) as holder:
        await holder.execute("SELECT 1")  # opens the transaction (autocommit is off)
        with psycopg.connect(db_url, autocommit=True) as reader:
            before = float(reader.execute(oldest).fetchone()[0])
            families = await scrape(api)
            after = float(reader.execute(oldest).fetchone()[0])
        await holder.rollback()
    assert 0 < before <= gauge(families, "tickwork_oldest_transaction_age_seconds") <= after
    assert gauge(await scrape(api), "tickwork_oldest_transaction_age_seconds") == 0


async def test_workers_present_counts_the_presence_locks_held_on_this_database(api, db_url,
                                                                             pg_server_url):
    assert gauge(await scrape(api), "tickwork_workers_present") == 0
    held = []
    for url, worker_id in ((db_url, "host:1:a"), (db_url, "host:2:b"), (pg_server_url, "host:3:c")):
        conn = await connect(url, application_name="tickwork-test-presence")
        await hold_presence(conn, worker_id)
        held.append(conn)
    assert gauge(await scrape(api), "tickwork_workers_present") == 2  # not the other database's
    with psycopg.connect(db_url, autocommit=True) as admin:  # a worker's session ends (and
        # pg_terminate_backend waits for it): its presence goes with it
        admin.execute("SELECT pg_terminate_backend(%s, 10000)", (held[0].info.backend_pid,))
    assert gauge(await scrape(api), "tickwork_workers_present") == 1
    for conn in held:
        await conn.close()


async def test_metrics_span_every_tenant_so_a_tenant_token_even_an_admin_gets_403(api):
    for tenant in ("globex", "acme"):  # acme's token is its tenant's admin
        response = await api.get("/metrics",
                                 headers={"Authorization": f"Bearer {api.tokens[tenant]}"})
        assert response.status_code == 403, (tenant, response.text)
        assert response.json()["error"] == "forbidden"
        assert "operator token" in response.json()["message"]


async def test_sse_subscribers_count_the_streams_the_hub_holds_open(api):
    from uuid import UUID

    hub = api.app.state.hub  # made and started with the app, before any stream
    assert gauge(await scrape(api), "tickwork_sse_subscribers") == 0
    async with hub.subscribe(UUID(int=1), 0), hub.subscribe(UUID(int=1), 0):
        async with hub.subscribe(UUID(int=2), 0):
            assert gauge(await scrape(api), "tickwork_sse_subscribers") == 3
    assert gauge(await scrape(api), "tickwork_sse_subscribers") == 0


async def test_two_apps_in_one_process_scrape_without_clashing(api, pool, settings, tokens,
                                                               db_url):
    import contextlib
    from uuid import UUID

    from tickwork.scheduler.api.hub import EventHub

    other = create_app(settings, pool=pool)
    other.state.hub = EventHub(pool, db_url)
    headers = {"Authorization": f"Bearer {tokens['acme']}"}
    async with contextlib.AsyncExitStack() as streams, httpx.AsyncClient(
            transport=httpx.ASGITransport(app=other), headers=headers,
            base_url="http://other.test") as client:
        for i in range(5):
            await streams.enter_async_context(other.state.hub.subscribe(UUID(int=i), 0))
        client.tokens = tokens
        first, second = await asyncio.gather(scrape(api), scrape(client))
        again = await scrape(client)
    assert gauge(first, "tickwork_sse_subscribers") == 0
    assert gauge(second, "tickwork_sse_subscribers") == 5
    assert gauge(again, "tickwork_sse_subscribers") == 5



async def test_failed_logins_and_the_brakes_refusals_are_counted(pool, settings, tokens):
    settings.auth_failure_limit = 2
    app = create_app(settings, pool=pool)
    transport = httpx.ASGITransport(app=app, client=("192.0.2.9", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        client.tokens = tokens
        assert gauge(await scrape(client), "tickwork_auth_failures") == 0
        wrong = {"Authorization": "Bearer tw_" + "A" * 43}
        answers = [(await client.get("/v1/agents", headers=wrong)).status_code for _ in range(4)]
        families = await scrape(client)  # the operator's valid token passes the brake
    assert answers == [401, 401, 429, 429]
    assert gauge(families, "tickwork_auth_failures") == 4
    assert gauge(families, "tickwork_auth_throttled") == 2
