"""Waiting is first class: a run waiting for a person is shown as `waiting` (API, filters,
schedule history), counts as unfinished for `overlap = skip`, and does not wait forever (the
sweep reminds once halfway through TICKWORK_APPROVAL_TTL_HOURS and expires it past the TTL).
Real Postgres, a real worker for the pauses, and the tick's and sweep's injected clock."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tickwork.scheduler.expiry import sweep_waiting
from tickwork.scheduler.tick import run_tick
from tickwork.sql.db import open_pool
from tickwork.sql.ids import new_id
from tickwork.worker.webhooks.deliverer import Deliverer
from tickwork.worker.webhooks.settings import WebhookSettings
from tests.factories import create_schedule, make_agent, make_tenant, make_webhook, queue_run
from tests.integration.api_checks import assert_error
from tests.integration.test_honest_runs import paused_run, suspended
from tests.integration.test_roles import granted  # noqa: F401  (fixture)
from tests.integration.webhook_receiver import Receiver
from tests.integration.workers import running_worker, scalar, until

TTL = 168
SEND = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                    "arguments": {"recipient": "ops", "text": "report"}}]},
                   {"text": "Handled."}]}


async def sender(api) -> str:
    response = await api.post("/v1/agents", json={"name": "sender",
                                                  "tools": ["demo.send_message"]})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def asked_at(db_url: str, run_id: str) -> datetime:
    return scalar(db_url, "SELECT created_at FROM approvals WHERE execution_id = %s", (run_id,))


async def events(api, run_id: str) -> list[dict]:
    response = await api.get(f"/v1/runs/{run_id}/events", headers={"Accept": "application/json"})
    return response.json()["items"]


# --- overlap = skip counts a waiting run ------------------------------------------------------

async def test_a_once_a_minute_schedule_whose_run_waits_fires_once_in_three_minutes(
        api, pool, settings, db_url):
    agent_id = await sender(api)
    schedule = await create_schedule(api, agent_id, "* * * * *", input=SEND)
    assert schedule["overlap"] == "skip"
    first = scalar(db_url, "SELECT next_run FROM schedules WHERE id = %s", (schedule["id"],))

    assert (await run_tick(pool, settings, now=first + timedelta(seconds=1))).dispatch.created == 1
    [run_id] = [str(r) for (r,) in psycopg.connect(db_url).execute(
        "SELECT id FROM executions WHERE schedule_id = %s", (schedule["id"],)).fetchall()]
    async with running_worker(pool, db_url):
        await until(db_url, *suspended(run_id))
        for minute in (1, 2):
            tick = await run_tick(pool, settings, now=first + timedelta(minutes=minute, seconds=1))
            assert tick.ok and tick.dispatch.claimed == 1 and tick.dispatch.created == 0

    assert scalar(db_url, "SELECT count(*) FROM executions WHERE schedule_id = %s",
                  (schedule["id"],)) == 1
    assert scalar(db_url, "SELECT count(*) FROM approvals") == 1
    history = (await api.get(f"/v1/schedules/{schedule['id']}/history")).json()["items"]
    assert [(h["kind"], h["reason"], h["execution_id"], h["status"]) for h in history] == [
        ("skipped_fire", "overlap", run_id, None), ("skipped_fire", "overlap", run_id, None),
        ("execution", "cron", run_id, "waiting")]


# --- status = waiting -------------------------------------------------------------------------

async def test_status_waiting_lists_exactly_the_waiting_runs_and_completed_leaves_them_out(
        api, pool, db_url):
    waiting = await paused_run(api, pool, db_url)
    agent_id = (await api.get(f"/v1/runs/{waiting}")).json()["agent_id"]
    finished = await queue_run(api, agent_id, {"script": [{"text": "Nothing to send."}]})
    queued = await queue_run(api, agent_id, SEND)
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT status = 'completed' AND breadcrumb IS NULL FROM executions"
                            " WHERE id = %s", (finished,))
        await until(db_url, *suspended(queued))
    other = await queue_run(api, agent_id, {})  # still queued: no worker now

    def ids(response) -> list[str]:
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["items"]]

    assert sorted(ids(await api.get("/v1/runs", params={"status": "waiting"}))) == sorted(
        [waiting, queued])
    assert ids(await api.get("/v1/runs", params={"status": "completed"})) == [finished]
    assert ids(await api.get("/v1/runs", params={"status": "queued"})) == [other]
    every = {r["id"]: r for r in (await api.get("/v1/runs")).json()["items"]}
    assert {i: (r["status"], r["breadcrumb"]) for i, r in every.items()} == {
        waiting: ("waiting", "suspended"), queued: ("waiting", "suspended"),
        finished: ("completed", None), other: ("queued", None)}
    assert (await api.get(f"/v1/runs/{waiting}")).json()["status"] == "waiting"
    refused = await api.get("/v1/runs", params={"status": "suspended"})
    assert refused.status_code == 422 and "waiting" in refused.text
    metrics = await api.get("/metrics", headers={"Authorization":
                                                 f"Bearer {api.tokens['operator']}"})
    assert 'tickwork_executions{outcome="none",status="waiting"} 2.0' in metrics.text


# --- approvals expire -------------------------------------------------------------------------

async def test_an_approval_past_its_ttl_ends_its_run_cancelled_expired_and_journaled(
        api, pool, db_url):
    await api.post("/v1/webhooks", json={"url": "https://example.com/hook",
                                         "events": ["run.cancelled"]})
    run_id = await paused_run(api, pool, db_url)
    [approval] = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
    before = await events(api, run_id)
    ask = asked_at(db_url, run_id)

    early = await sweep_waiting(pool, now=ask + timedelta(hours=TTL, seconds=-1), ttl_hours=TTL,
                                batch_size=10)
    assert early.expired == 0
    assert (await api.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting"

    swept = await sweep_waiting(pool, now=ask + timedelta(hours=TTL, seconds=1), ttl_hours=TTL,
                                batch_size=10)
    assert swept.expired == 1
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"], run["reason"], run["breadcrumb"]) == (
        "cancelled", "cancelled", "expired", None)
    after = await events(api, run_id)
    assert after[: len(before)] == before
    [end] = after[len(before):]
    assert end["type"] == "run_complete"
    assert (end["payload"]["status"], end["payload"]["reason"]) == ("cancelled", "expired")
    decided = (await api.get("/v1/approvals", params={"status": "expired"})).json()["items"]
    assert [a["id"] for a in decided] == [approval["id"]]
    assert scalar(db_url, "SELECT count(*) FROM run_states") == 0  # the real arguments are gone
    [(kind, data)] = psycopg.connect(db_url).execute(
        "SELECT type, data FROM webhook_deliveries").fetchall()
    assert (kind, data["run_id"], data["reason"]) == ("run.cancelled", run_id, "expired")

    late = assert_error(await api.post(f"/v1/approvals/{approval['id']}/approve"), 409,
                        "approval_expired")
    assert "expired" in late["message"]
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
    again = await sweep_waiting(pool, now=ask + timedelta(hours=TTL * 2), ttl_hours=TTL,
                                batch_size=10)
    assert (again.expired, again.reminded) == (0, 0)


async def test_the_tick_expires_with_the_configured_ttl(api, pool, settings, db_url):
    run_id = await paused_run(api, pool, db_url)
    ask = asked_at(db_url, run_id)
    short = settings.model_copy(update={"approval_ttl_hours": 2})
    outcome = await run_tick(pool, short, now=ask + timedelta(hours=1, minutes=1))
    assert outcome.ok and (outcome.waiting.reminded, outcome.waiting.expired) == (1, 0)
    outcome = await run_tick(pool, short, now=ask + timedelta(hours=2, minutes=1))
    assert outcome.ok and outcome.waiting.expired == 1
    assert (await api.get(f"/v1/runs/{run_id}")).json()["reason"] == "expired"


async def test_a_decision_made_before_the_expiry_keeps_the_run(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    [approval] = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
    assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
    swept = await sweep_waiting(pool, now=asked_at(db_url, run_id) + timedelta(hours=TTL + 1),
                                ttl_hours=TTL, batch_size=10)
    assert swept.expired == 0
    assert scalar(db_url, "SELECT status FROM approvals") == "approved"
    assert scalar(db_url, "SELECT breadcrumb FROM executions WHERE id = %s", (run_id,)) == (
        "suspended")  # still waiting for its resume, which a worker takes


# --- the reminder fires once, even from two sweeps at once ------------------------------------

def waiting_runs(db_url: str, tenant_id, agent_id, n: int, asked: datetime) -> list[str]:
    """n runs waiting for approval, each with its pending approval and saved state, written as
    a worker's pause writes them (sql update_execution_suspended)."""
    ids = []
    with psycopg.connect(db_url) as conn:
        for _ in range(n):
            run_id = new_id()
            conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                         " trigger_source, scheduled_for, status, breadcrumb, started_at)"
                         " VALUES (%s, %s, %s, 'run', 'api', %s, 'completed', 'suspended', %s)",
                         (run_id, tenant_id, agent_id, asked, asked))
            conn.execute("INSERT INTO run_events (execution_id, seq, type, payload)"
                         " VALUES (%s, 1, 'run_start', '{}')", (run_id,))
            conn.execute("INSERT INTO run_states (execution_id, version, state)"
                         " VALUES (%s, 1, %s)", (run_id, Jsonb({"pending": "call"})))
            conn.execute("INSERT INTO approvals (id, tenant_id, execution_id, tool_call_id, tool,"
                         " created_at) VALUES (%s, %s, %s, 'c1', 'demo.send_message', %s)",
                         (f"{run_id}:c1", tenant_id, run_id, asked))
            ids.append(str(run_id))
    return ids


@pytest.fixture
async def second_pool(db_url):
    pool = await open_pool(db_url, application_name="tickwork-test-second-sweep", min_size=1,
                           max_size=2)
    yield pool
    await pool.close()


async def test_the_reminder_fires_exactly_once_even_from_two_sweeps_at_once(
        db_url, pool, second_pool):
    with psycopg.connect(db_url) as conn:
        tenant_id = make_tenant(conn)
        agent_id = make_agent(conn, tenant_id)
        hooks = [make_webhook(conn, tenant_id, ["approval.reminder"]),
                 make_webhook(conn, tenant_id, ["approval.reminder", "run.cancelled"])]
        make_webhook(conn, tenant_id, ["approval.required"])  # did not ask for reminders
        asked = conn.execute("SELECT now() - interval '1 hour'").fetchone()[0]
    runs = waiting_runs(db_url, tenant_id, agent_id, 40, asked)
    halfway = asked + timedelta(hours=TTL / 2, seconds=1)

    assert (await sweep_waiting(pool, now=halfway - timedelta(seconds=2), ttl_hours=TTL,
                                batch_size=7)).reminded == 0
    results = await asyncio.gather(*(sweep_waiting(p, now=halfway, ttl_hours=TTL, batch_size=7)
                                     for p in (pool, second_pool, pool, second_pool)))
    assert sum(r.reminded for r in results) == 40 and all(r.expired == 0 for r in results)
    rows = psycopg.connect(db_url).execute(
        "SELECT webhook_id, data ->> 'run_id', data ->> 'expires_at' FROM webhook_deliveries"
        " WHERE type = 'approval.reminder'").fetchall()
    assert sorted((w, r) for w, r, _ in rows) == sorted((w, r) for w in hooks for r in runs)
    assert scalar(db_url, "SELECT count(*) FROM approvals WHERE reminded_at = %s",
                  (halfway,)) == 40

    # Later sweeps, and the expiry, never remind again.
    for hours in (TTL * 3 / 4, TTL - 1):
        later = await sweep_waiting(pool, now=asked + timedelta(hours=hours), ttl_hours=TTL,
                                    batch_size=7)
        assert (later.reminded, later.expired) == (0, 0)
    ended = await asyncio.gather(*(sweep_waiting(p, now=asked + timedelta(hours=TTL, seconds=1),
                                                 ttl_hours=TTL, batch_size=7)
                                   for p in (pool, second_pool)))
    assert sum(r.expired for r in ended) == 40 and sum(r.reminded for r in ended) == 0
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries"
                          " WHERE type = 'approval.reminder'") == 80
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries"
                          " WHERE type = 'run.cancelled'") == 40
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_complete'") == 40
    assert scalar(db_url, "SELECT count(*) FROM approvals WHERE status = 'expired'") == 40


async def test_an_approval_already_past_its_ttl_is_expired_without_a_reminder(
        db_url, pool):
    with psycopg.connect(db_url) as conn:
        tenant_id = make_tenant(conn)
        agent_id = make_agent(conn, tenant_id)
        make_webhook(conn, tenant_id, ["approval.reminder"])
        asked = conn.execute("SELECT now()").fetchone()[0]
    [run_id] = waiting_runs(db_url, tenant_id, agent_id, 1, asked)
    swept = await sweep_waiting(pool, now=asked + timedelta(hours=TTL * 2), ttl_hours=TTL,
                                batch_size=10)
    assert (swept.reminded, swept.expired) == (0, 1)
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 0
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) == "cancelled"


async def test_the_scheduler_s_and_the_api_s_roles_remind_and_expire_through_their_doors(
        granted, db_url):
    """The scheduler's role may not update approvals or drop saved states, and the API's sees
    one tenant's rows at a time (sql/grants.sql): the sweep and the HTTP tick go through
    migration 0075's functions, across tenants."""
    with psycopg.connect(db_url) as conn:
        tenants = [make_tenant(conn, name) for name in ("one", "two")]
        agents = [make_agent(conn, tenant) for tenant in tenants]
        for tenant in tenants:
            make_webhook(conn, tenant, ["approval.reminder"])
        asked = conn.execute("SELECT now()").fetchone()[0]
    runs = [run for tenant, agent in zip(tenants, agents)
            for run in waiting_runs(db_url, tenant, agent, 2, asked)]
    pools = [await open_pool(granted[role], application_name=f"tickwork-test-{role}")
             for role in ("tickwork_scheduler", "tickwork_api")]
    try:
        scheduler_pool, api_pool = pools
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            async with scheduler_pool.connection() as conn:
                await conn.execute("UPDATE approvals SET status = 'expired'")
        reminded = await sweep_waiting(scheduler_pool, now=asked + timedelta(hours=TTL / 2 + 1),
                                       ttl_hours=TTL, batch_size=3)
        assert (reminded.reminded, reminded.expired) == (4, 0)
        expired = await sweep_waiting(api_pool, now=asked + timedelta(hours=TTL + 1),
                                      ttl_hours=TTL, batch_size=3)
        assert (expired.reminded, expired.expired) == (0, 4)
    finally:
        for pool in pools:
            await pool.close()
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 4
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE status = 'cancelled'"
                          " AND reason = 'expired' AND id = ANY (%s::uuid[])", (runs,)) == 4
    assert scalar(db_url, "SELECT count(*) FROM run_states") == 0


async def test_stray_pending_approvals_of_runs_that_no_longer_wait_never_hold_up_expiry(
        db_url, pool):
    with psycopg.connect(db_url) as conn:
        tenant_id = make_tenant(conn)
        agent_id = make_agent(conn, tenant_id)
        asked = conn.execute("SELECT now()").fetchone()[0]
    strays = waiting_runs(db_url, tenant_id, agent_id, 3, asked - timedelta(hours=1))
    with psycopg.connect(db_url) as conn:  # ended some other way, their approvals left pending
        conn.execute("UPDATE executions SET status = 'failed', breadcrumb = NULL"
                     " WHERE id = ANY (%s::uuid[])", (strays,))
    [waiting] = waiting_runs(db_url, tenant_id, agent_id, 1, asked)
    swept = await sweep_waiting(pool, now=asked + timedelta(hours=TTL + 1), ttl_hours=TTL,
                                batch_size=1)
    assert swept.expired == 1
    assert scalar(db_url, "SELECT reason FROM executions WHERE id = %s", (waiting,)) == "expired"
    assert scalar(db_url, "SELECT count(*) FROM approvals WHERE status = 'pending'") == 3


async def test_the_reminder_reaches_the_receiver_signed_and_names_the_approval(api, pool, db_url):
    with Receiver() as receiver:
        hook = (await api.post("/v1/webhooks", json={"url": receiver.url,
                                                     "events": ["approval.reminder"]})).json()
        run_id = await paused_run(api, pool, db_url)
        [approval] = (await api.get("/v1/approvals")).json()["items"]
        ask = asked_at(db_url, run_id)
        swept = await sweep_waiting(pool, now=ask + timedelta(hours=TTL / 2), ttl_hours=TTL,
                                    batch_size=10)
        assert swept.reminded == 1
        deliverer = Deliverer(pool, WebhookSettings(webhook_allow_private_addresses=True))
        try:
            assert [a.status for a in await deliverer.deliver_once()] == ["delivered"]
        finally:
            await deliverer.aclose()
    [received] = receiver.received
    assert received.signed_by(hook["secret"])
    assert received.document["type"] == "approval.reminder"
    data = received.document["data"]
    assert (data["approval_id"], data["run_id"], data["tool"]) == (
        approval["id"], run_id, "demo.send_message")
    assert "report" not in str(data)  # never the call's arguments
    assert datetime.fromisoformat(data["expires_at"]) == ask + timedelta(hours=TTL)


async def test_a_decision_in_flight_during_the_expiry_wins_and_the_run_is_not_expired(
        db_url, pool):
    """A person's approve holds the approval's row while the sweep runs: the sweep skips it
    (SKIP LOCKED, never waiting) and the decision commits; the run is not cancelled."""
    with psycopg.connect(db_url) as conn:
        tenant_id = make_tenant(conn)
        agent_id = make_agent(conn, tenant_id)
        asked = conn.execute("SELECT now()").fetchone()[0]
    [run_id] = waiting_runs(db_url, tenant_id, agent_id, 1, asked)
    with psycopg.connect(db_url) as deciding:  # the API's decision, not yet committed
        deciding.execute("UPDATE approvals SET status = 'approved', decided_at = now()"
                         " WHERE execution_id = %s AND status = 'pending'", (run_id,))
        swept = await sweep_waiting(pool, now=asked + timedelta(hours=TTL + 1), ttl_hours=TTL,
                                    batch_size=10)
        assert swept.expired == 0
    assert scalar(db_url, "SELECT status FROM approvals") == "approved"
    assert scalar(db_url, "SELECT breadcrumb FROM executions WHERE id = %s", (run_id,)) == (
        "suspended")
