"""Webhooks under least privilege: runs ended by the worker's, the scheduler's and the API's
own roles queue their events (the enqueue triggers run as the owner), the deliverer does its
whole job as tickwork_worker, and two deliverers side by side send each delivery once."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest

from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.scheduler.sweep import sweep_stale
from tickwork.sql.db import open_pool
from tests.factories import create_agent, queue_run
from tests.integration.test_honest_runs import done
from tests.integration.test_roles import granted  # noqa: F401  (fixture)
from tests.integration.test_webhooks_events import ALL
from tests.integration.webhook_receiver import Receiver
from tests.integration.workers import running_worker, scalar, until
from tickwork.worker.claim import claim_queued_runs
from tickwork.worker.webhooks.deliverer import Deliverer
from tickwork.worker.webhooks.settings import WebhookSettings


async def test_every_role_queues_its_events_and_the_worker_role_delivers_them(
        granted, settings, tokens, db_url):
    api_pool = await open_pool(granted["tickwork_api"], application_name="tickwork-api")
    worker_pool = await open_pool(granted["tickwork_worker"], application_name="tickwork-worker")
    scheduler_pool = await open_pool(granted["tickwork_scheduler"],
                                     application_name="tickwork-scheduler")
    app = create_app(settings, pool=api_pool)
    deliverer = Deliverer(worker_pool, WebhookSettings(webhook_allow_private_addresses=True))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://api.test",
                                     headers={"Authorization": f"Bearer {tokens['acme']}"}) as api:
            with Receiver() as receiver:
                hook = (await api.post("/v1/webhooks", json={"url": receiver.url,
                                                             "events": ALL})).json()
                agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
                completed = await queue_run(api, agent_id, {"script": [{"text": "Done."}]})
                async with running_worker(worker_pool, db_url):  # the worker's role ends it
                    await until(db_url, *done(completed))
                cancelled = await queue_run(api, agent_id, {})  # the API's role cancels it
                assert (await api.post(f"/v1/runs/{cancelled}/cancel")).status_code == 202
                timed_out = await queue_run(api, agent_id, {})  # the scheduler's role sweeps it
                await claim_queued_runs(worker_pool, limit=10, worker_id="test")
                swept = await sweep_stale(scheduler_pool, batch_size=10,
                                          now=datetime.now(timezone.utc) + timedelta(minutes=16))
                assert swept.failed == 1
                attempts = await deliverer.deliver_once()
                assert sorted(a.status for a in attempts) == ["delivered"] * 3
            logged = (await api.get(f"/v1/webhooks/{hook['id']}/deliveries")).json()["items"]
        assert {(r.document["type"], r.document["data"]["run_id"]) for r in receiver.received} \
            == {("run.completed", completed), ("run.cancelled", cancelled),
                ("run.failed", timed_out)}
        assert all(r.signed_by(hook["secret"]) for r in receiver.received)
        assert [d["status"] for d in logged] == ["delivered"] * 3
    finally:
        await deliverer.aclose()
        await stop_hub(app)
        for pool in (api_pool, worker_pool, scheduler_pool):
            await pool.close()


async def test_two_deliverers_side_by_side_send_each_delivery_exactly_once(api, db_url):
    with Receiver() as receiver:
        await api.post("/v1/webhooks", json={"url": receiver.url, "events": ["run.cancelled"]})
        agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
        for _ in range(30):
            run_id = await queue_run(api, agent_id, {})
            assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
        pools = [await open_pool(db_url, application_name=f"deliverer-{i}") for i in range(2)]
        settings = WebhookSettings(webhook_concurrency=4, webhook_allow_private_addresses=True)
        deliverers = [Deliverer(pool, settings) for pool in pools]
        try:
            sent = 0
            while scalar(db_url, "SELECT count(*) FROM webhook_deliveries"
                                 " WHERE status = 'pending'"):
                batches = await asyncio.gather(*(d.deliver_once() for d in deliverers))
                sent += sum(len(batch) for batch in batches)
        finally:
            for deliverer, pool in zip(deliverers, pools):
                await deliverer.aclose()
                await pool.close()
    ids = [r.headers["tickwork-delivery"] for r in receiver.received]
    assert sent == len(ids) == len(set(ids)) == 30


async def test_the_queueing_doors_called_by_hand_add_only_what_was_due_once(granted, api,
                                                                             db_url):
    await api.post("/v1/webhooks", json={"url": "https://example.com/h", "events": ALL})
    agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
    waiting = await queue_run(api, agent_id, {})
    ended = await queue_run(api, agent_id, {})
    assert (await api.post(f"/v1/runs/{ended}/cancel")).status_code == 202
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 1
    for role in ("tickwork_worker", "tickwork_api", "tickwork_scheduler"):
        with psycopg.connect(granted[role], autocommit=True) as conn:
            for run_id in (waiting, ended):  # a queued run is not over; an ended one is queued
                assert conn.execute("SELECT webhooks_queue_run_end(%s)",
                                    (run_id,)).fetchone() == (0,)
            assert conn.execute("SELECT webhooks_queue_approval(%s)",
                                (f"{waiting}:nope",)).fetchone() == (0,)
            if role != "tickwork_worker":  # the deliverer signs with the secrets
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("SELECT secret FROM webhooks")
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 1
