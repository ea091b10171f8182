"""Webhook delivery against a real HTTP receiver on a loopback port: signed POSTs, retries
with the same delivery id on an injected clock, the delivery log, a day of retries, and real
runs through a worker process whose runs a hanging receiver does not hold up."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import uuid4

import pytest

from tests.factories import create_agent, queue_run
from tests.integration.test_honest_runs import done, suspended
from tests.integration.test_webhooks_events import ALL
from tests.integration.webhook_receiver import Receiver
from tests.integration.workers import WorkerProcess, running_worker, scalar, until
from tickwork.worker.webhooks.deliverer import Deliverer
from tickwork.worker.webhooks.policy import HORIZON_SECONDS
from tickwork.worker.webhooks.settings import WebhookSettings


@pytest.fixture
async def deliverer(pool):
    # The receiver is on a loopback port: a private address, refused unless allowed.
    deliverer = Deliverer(pool, WebhookSettings(webhook_timeout_seconds=5,
                                                webhook_allow_private_addresses=True))
    yield deliverer
    await deliverer.aclose()


async def add_hook(api, url: str, events=ALL) -> dict:
    response = await api.post("/v1/webhooks", json={"url": url, "events": list(events)})
    assert response.status_code == 201, response.text
    return response.json()


async def cancelled_run(api) -> str:
    """A run.cancelled event through the API's real cancel of a queued run."""
    agent = await create_agent(api, f"hooked-{uuid4().hex[:8]}", tools=["demo.get_record"])
    run_id = await queue_run(api, agent["id"], {})
    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code in (200, 202)
    return run_id


def due_at(db_url: str):
    return scalar(db_url, "SELECT min(next_attempt_at) FROM webhook_deliveries")


async def deliveries(api, hook_id: str) -> list[dict]:
    response = await api.get(f"/v1/webhooks/{hook_id}/deliveries")
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def test_a_run_completed_arrives_signed_with_the_webhooks_secret(api, pool, db_url,
                                                                       deliverer):
    with Receiver() as receiver:
        hook = await add_hook(api, receiver.url, ["run.completed"])
        agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
        run_id = await queue_run(api, agent_id, {"script": [{"text": "Done."}]})
        async with running_worker(pool, db_url):
            await until(db_url, *done(run_id))
        [attempt] = await deliverer.deliver_once()

    [got] = receiver.received
    assert attempt.delivered and attempt.status == "delivered"
    assert got.signed_by(hook["secret"]) and not got.signed_by("whsec_other")
    assert got.headers["tickwork-delivery"] == got.document["id"] == attempt.delivery_id
    assert got.headers["content-type"] == "application/json"
    body = got.document
    assert set(body) == {"id", "type", "created_at", "data"} and body["type"] == "run.completed"
    assert body["created_at"].endswith("Z")
    assert (body["data"]["run_id"], body["data"]["agent_id"]) == (run_id, agent_id)
    assert (body["data"]["status"], body["data"]["outcome"]) == ("completed", "done")
    [logged] = await deliveries(api, hook["id"])
    assert (logged["status"], logged["attempts"], logged["last_status_code"]) == (
        "delivered", 1, 200)
    assert logged["next_attempt_at"] is None and logged["delivered_at"] is not None


async def test_a_receiver_that_fails_twice_gets_it_on_the_third_attempt_with_the_same_id(
        api, db_url, deliverer):
    with Receiver(answers=(500, 503)) as receiver:
        hook = await add_hook(api, receiver.url)
        await cancelled_run(api)
        first = due_at(db_url)
        [one] = await deliverer.deliver_once(now=first)
        assert (one.status, one.status_code) == ("pending", 500)
        assert due_at(db_url) == first + timedelta(seconds=10)
        assert await deliverer.deliver_once(now=first + timedelta(seconds=9)) == []  # not due
        [two] = await deliverer.deliver_once(now=first + timedelta(seconds=10))
        assert (two.status, two.status_code) == ("pending", 503)
        assert due_at(db_url) == first + timedelta(seconds=40)  # both retries within a minute
        logged = (await deliveries(api, hook["id"]))[0]
        assert (logged["status"], logged["attempts"], logged["last_status_code"]) == (
            "pending", 2, 503)
        assert logged["last_error"] == "the receiver answered HTTP 503"
        assert logged["next_attempt_at"] is not None
        [three] = await deliverer.deliver_once(now=first + timedelta(seconds=40))
        assert (three.status, three.status_code, three.attempt) == ("delivered", 200, 3)
        assert await deliverer.deliver_once(now=first + timedelta(days=2)) == []

    ids = {r.headers["tickwork-delivery"] for r in receiver.received}
    assert len(receiver.received) == 3 and ids == {one.delivery_id}
    assert len({r.body for r in receiver.received}) == 1  # the receiver can dedupe by id
    assert all(r.signed_by(hook["secret"]) for r in receiver.received)
    logged = (await deliveries(api, hook["id"]))[0]
    assert (logged["status"], logged["attempts"], logged["last_status_code"]) == (
        "delivered", 3, 200)


async def test_a_receiver_that_is_down_is_retried_for_a_day_then_given_up(api, db_url,
                                                                          deliverer):
    with Receiver() as receiver:
        url = receiver.url  # a port nobody listens on once the receiver is gone
    hook = await add_hook(api, url)
    await cancelled_run(api)
    created = scalar(db_url, "SELECT created_at FROM webhook_deliveries")
    attempts = []
    while scalar(db_url, "SELECT status FROM webhook_deliveries") == "pending":
        moment = due_at(db_url)
        [attempt] = await deliverer.deliver_once(now=moment)
        attempts.append((moment, attempt))
        assert len(attempts) < 30

    assert attempts[-1][1].status == "failed"
    assert attempts[-1][0] - created >= timedelta(seconds=HORIZON_SECONDS)
    assert attempts[2][0] - attempts[0][0] <= timedelta(seconds=60)
    assert all(a.status_code is None and "ConnectError" in a.error for _, a in attempts)
    [logged] = await deliveries(api, hook["id"])
    assert (logged["status"], logged["attempts"]) == ("failed", len(attempts))
    assert "ConnectError" in logged["last_error"] and logged["next_attempt_at"] is None


async def test_an_approval_and_a_completed_run_reach_the_receiver_through_a_worker(api, db_url):
    with Receiver() as receiver:
        hook = await add_hook(api, receiver.url, ["approval.required", "run.completed"])
        agent_id = (await create_agent(api, "sender", tools=["demo.send_message"]))["id"]
        script = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                              "arguments": {"recipient": "ops", "text": "hi"}}]},
                             {"text": "Sent."}]}
        run_id = await queue_run(api, agent_id, script)
        worker = WorkerProcess(db_url, TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES="1")
        try:
            await until(db_url, *suspended(run_id))
            await asyncio.to_thread(receiver.wait_for, lambda r: r.of_type("approval.required"))
            [asked] = receiver.of_type("approval.required")
            assert asked.signed_by(hook["secret"])
            approval_id = asked.document["data"]["approval_id"]
            assert asked.document["data"] == {
                "approval_id": approval_id, "run_id": run_id, "agent_id": agent_id,
                "schedule_id": None, "tool": "demo.send_message", "status": "pending"}
            assert (await api.post(f"/v1/approvals/{approval_id}/approve")).status_code == 200
            await asyncio.to_thread(receiver.wait_for, lambda r: r.of_type("run.completed"))
        finally:
            worker.process.terminate()
            worker.process.wait(timeout=60)

    [finished] = receiver.of_type("run.completed")
    assert finished.signed_by(hook["secret"])
    assert finished.document["data"]["run_id"] == run_id
    assert len(receiver.received) == 2
    logged = await deliveries(api, hook["id"])
    assert [(d["type"], d["status"], d["attempts"]) for d in logged] == [
        ("run.completed", "delivered", 1), ("approval.required", "delivered", 1)]


async def test_a_receiver_that_hangs_does_not_hold_up_runs(api, db_url):
    with Receiver(hold=True) as receiver:
        await add_hook(api, receiver.url, ["run.completed"])
        agent_id = (await create_agent(api, "hooked", tools=["demo.get_record"]))["id"]
        runs = [await queue_run(api, agent_id, {"script": [{"text": f"Done {i}."}]})
                for i in range(4)]
        worker = WorkerProcess(db_url, concurrency=1, TICKWORK_WEBHOOK_TIMEOUT_SECONDS="120",
                               TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES="1")
        try:
            # Every run ends while the receiver still holds a delivery open and none has been
            # answered: the runs never waited on a delivery.
            await asyncio.to_thread(receiver.wait_for, lambda r: r.held >= 1)
            await until(db_url, "SELECT count(*) = 4 FROM executions WHERE status = 'completed'"
                                " AND breadcrumb IS NULL")
            assert receiver.held >= 1 and receiver.received == []
            assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries"
                                  " WHERE status = 'pending'") == 4
            receiver.release.set()
            await asyncio.to_thread(receiver.wait_for, lambda r: len(r.received) == 4)
        finally:
            worker.process.terminate()
            worker.process.wait(timeout=60)
    assert {r.document["data"]["run_id"] for r in receiver.received} == set(runs)


async def test_finished_deliveries_leave_the_log_after_the_keep_days_pending_ones_stay(
        api, pool, db_url, deliverer):
    from tickwork.sql import QUERIES

    with Receiver(answers=(500,)) as receiver:
        await add_hook(api, receiver.url, ["run.cancelled"])
        await cancelled_run(api)
        await cancelled_run(api)
        first = scalar(db_url, "SELECT max(next_attempt_at) FROM webhook_deliveries")
        attempts = await deliverer.deliver_once(now=first)
    assert sorted(a.status for a in attempts) == ["delivered", "pending"]
    prune = QUERIES["delete_old_webhook_deliveries"]
    async with pool.connection() as conn:
        await conn.execute(prune, {"now": first + timedelta(days=6), "keep_days": 7,
                                   "limit": 100})
        assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 2  # not old enough
        await conn.execute(prune, {"now": first + timedelta(days=8), "keep_days": 7,
                                   "limit": 100})
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 1
    assert scalar(db_url, "SELECT status FROM webhook_deliveries") == "pending"


async def test_a_private_address_is_refused_unless_the_workers_allow_it(api, pool, db_url):
    with Receiver() as receiver:
        hook = await add_hook(api, receiver.url.replace("127.0.0.1", "localhost"))
        await cancelled_run(api)
        strict = Deliverer(pool, WebhookSettings())
        try:
            [refused] = await strict.deliver_once()
        finally:
            await strict.aclose()
        assert receiver.received == [] and refused.status == "pending"
        [logged] = await deliveries(api, hook["id"])
        assert logged["last_error"].startswith("refused: localhost is 127.0.0.1")
        assert "TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=1" in logged["last_error"]
