"""Which events are queued for delivery, and with what data: the triggers of migration 0034,
driven through real runs (a worker, the API's cancel, the stale sweep) and plain statements on
a real Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.types.json import Jsonb

from tickwork.scheduler.sweep import sweep_stale
from tests.factories import (create_agent, make_agent, make_tenant, make_webhook, queue_run,
                             queue_runs_at_once)
from tests.integration.test_honest_runs import done, paused_run
from tests.integration.workers import running_worker, scalar, until
from tickwork.worker.claim import claim_queued_runs

ALL = ["approval.required", "run.failed", "run.completed", "run.cancelled"]


async def hook(api, events, token=None, url="https://example.com/hook") -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    response = await api.post("/v1/webhooks", json={"url": url, "events": events},
                              headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def queued(db_url: str) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT webhook_id::text, type, data FROM webhook_deliveries"
                            " ORDER BY id").fetchall()


async def test_a_finished_run_is_queued_once_for_each_webhook_that_asked_for_it(api, pool, db_url):
    wanted = await hook(api, ["run.completed"])
    await hook(api, ["run.failed", "approval.required"])
    await hook(api, ALL, token=api.tokens["globex"])  # another tenant hears nothing of acme's
    agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
    run_id = await queue_run(api, agent_id, {"script": [{"text": "Done."}]})
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))

    [(webhook_id, kind, data)] = queued(db_url)
    assert (webhook_id, kind) == (wanted, "run.completed")
    assert data["run_id"] == run_id and data["agent_id"] == agent_id
    assert (data["status"], data["outcome"], data["attempt"]) == ("completed", "done", 1)
    assert data["usage"]["model_calls"] >= 1


async def test_a_pause_is_approval_required_without_the_arguments_and_a_cancel_follows(api, pool,
                                                                                        db_url):
    await hook(api, ALL)
    run_id = await paused_run(api, pool, db_url)
    [(_, kind, data)] = queued(db_url)  # the pause itself is not a run.completed
    approval = (await api.get("/v1/approvals")).json()["items"][0]
    assert kind == "approval.required"
    assert data["approval_id"] == approval["id"] and data["run_id"] == run_id
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert data["tool"] == "demo.send_message" and data["agent_id"] == run["agent_id"]
    assert "report" not in str(data) and "ops" not in str(data)  # the call's arguments stay home

    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code in (200, 202)
    kinds = [(k, d.get("status"), d.get("reason")) for _, k, d in queued(db_url)]
    assert kinds[1:] == [("run.cancelled", "cancelled", "cancelled while waiting for approval")]


async def test_a_cancelled_queued_run_and_a_timed_out_run_are_reported(api, pool, db_url):
    await hook(api, ALL)
    agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
    cancelled = await queue_run(api, agent_id, {})
    assert (await api.post(f"/v1/runs/{cancelled}/cancel")).status_code in (200, 202)
    timed_out = await queue_run(api, agent_id, {})
    [claimed] = await claim_queued_runs(pool, limit=10, worker_id="test")
    assert str(claimed.id) == timed_out
    swept = await sweep_stale(pool, now=datetime.now(timezone.utc) + timedelta(minutes=16),
                              batch_size=10)
    assert swept.failed == 1 and swept.retried == 1

    found = [(k, d["run_id"], d["outcome"]) for _, k, d in queued(db_url)]
    assert found == [("run.cancelled", cancelled, "cancelled"),
                     ("run.failed", timed_out, "timed_out")]  # the retry is queued: no event


async def test_a_tenant_without_webhooks_gets_no_delivery_rows(api, pool, db_url):
    await hook(api, ALL, token=api.tokens["globex"])
    agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
    run_id = await queue_run(api, agent_id, {"script": [{"text": "Done."}]})
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 0


async def test_a_run_released_at_shutdown_is_not_reported_but_a_rolled_back_end_is_not_either(
        api, pool, db_url):
    await hook(api, ALL)
    agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
    run_id = await queue_run(api, agent_id, {})
    await claim_queued_runs(pool, limit=10, worker_id="test")
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE executions SET status = 'failed', outcome = 'failed' WHERE id = %s",
                     (run_id,))
        conn.rollback()
        conn.execute("UPDATE executions SET status = 'failed', outcome = 'failed',"
                     " breadcrumb = 'released' WHERE id = %s", (run_id,))
        conn.commit()
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 0


def test_one_statement_that_ends_many_runs_queues_each_reported_end_once(db_url):
    """The worker ends a few dozen runs per statement: each run that entered a reported end
    state is queued for its tenant's webhook, and nothing else is, whatever else the statement
    changed; a run that ended before the webhook existed is not reported by a later update."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        hooked, quiet = make_tenant(conn), make_tenant(conn)
        webhook_id = make_webhook(conn, hooked, ALL)
        agents = make_agent(conn, hooked), make_agent(conn, quiet)
    done_, paused, failed, released, cancelled, going = queue_runs_at_once(db_url, agents[0], 6)
    others = queue_runs_at_once(db_url, agents[1], 2)
    ends = {done_: ("completed", None), paused: ("completed", "suspended"),
            failed: ("failed", None), released: ("failed", "released"),
            cancelled: ("cancelled", None), going: ("running", None),
            others[0]: ("completed", None), others[1]: ("failed", None)}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE executions SET status = 'running'")  # a claim: nothing ended
        assert queued(db_url) == []
        conn.execute("UPDATE executions e SET status = v.status, breadcrumb = v.breadcrumb,"
                     " usage = e.usage || '{\"model_calls\": 1}'"
                     " FROM (SELECT * FROM jsonb_to_recordset(%s)"
                     "       AS x(id uuid, status text, breadcrumb text)) v WHERE e.id = v.id",
                     (Jsonb([{"id": str(run), "status": status, "breadcrumb": crumb}
                             for run, (status, crumb) in ends.items()]),))
        assert sorted((data["run_id"], kind) for _, kind, data in queued(db_url)) == sorted(
            [(str(done_), "run.completed"), (str(failed), "run.failed"),
             (str(cancelled), "run.cancelled")])
        # The paused run resumes and completes: now it is reported, once.
        conn.execute("UPDATE executions SET status = 'running', breadcrumb = NULL"
                     " WHERE id = %s", (paused,))
        conn.execute("UPDATE executions SET status = 'completed' WHERE id IN (%s, %s)",
                     (paused, going))
        # A run that ended before its tenant had a webhook is not reported by a later change
        # that leaves its state as it is.
        make_webhook(conn, quiet, ALL, url="https://example.com/late")
        conn.execute("UPDATE executions SET reason = 'noted' WHERE id = ANY (%s)", (others,))
    deliveries = queued(db_url)
    assert sorted((data["run_id"], kind) for _, kind, data in deliveries) == sorted(
        [(str(done_), "run.completed"), (str(failed), "run.failed"),
         (str(cancelled), "run.cancelled"), (str(paused), "run.completed"),
         (str(going), "run.completed")])
    assert {webhook for webhook, _, _ in deliveries} == {str(webhook_id)}
