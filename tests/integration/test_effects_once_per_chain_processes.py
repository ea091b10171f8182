"""R13 with real worker processes and the hostile OpenAI-compatible server over real HTTP: a
run's send completes, then its model takes a long turn, and the worker is stopped (SIGTERM past
its grace period, or kill -9). The chain that follows delivers the send exactly once, its next
attempt's model is sent the completed call and its result, and the chain's usage counts every
attempt. The same after a send a person approved."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.factories import create_agent, queue_run
from tests.hostile_model import HostileModel, call, reply
from tests.integration.workers import WorkerProcess, scalar, until
from tickwork.scheduler.sweep import sweep_once

SEND = "demo.send_message"
ARGUMENTS = {"recipient": "ops", "text": "the weekly report"}


@pytest.fixture
def model():
    with HostileModel() as hostile:
        yield hostile


def worker_process(db_url: str, model: HostileModel) -> WorkerProcess:
    return WorkerProcess(db_url, TICKWORK_MODELS="default=openai:hostile-agent,judge=scripted",
                         TICKWORK_OPENAI_BASE_URL=model.base_url,
                         TICKWORK_SHUTDOWN_GRACE_SECONDS="0.5")


async def requests_seen(model: HostileModel, count: int, timeout: float = 60) -> None:
    """Wait until the model server has taken ``count`` requests (it runs in this process: no
    database event says so)."""
    deadline = time.monotonic() + timeout
    while len(model.accepted()) < count:
        assert time.monotonic() < deadline, f"the model saw {len(model.accepted())} requests"
        await asyncio.sleep(0.05)


def long_turn() -> list:
    """The send, then a turn the model takes minutes over, then (for the retry) the answer."""
    return [reply(None, call(SEND, ARGUMENTS), usage=(100, 10)),
            reply("Thinking it over…", hang=600, usage=(999, 999)),
            reply("Sent the weekly report.", usage=(200, 20))]


async def sweep_past_deadlines(db_url: str) -> int:
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True,
                                                     row_factory=dict_row) as conn:
        return (await sweep_once(conn, now=later, limit=10)).failed


async def finish_chain(db_url: str, model: HostileModel, run_id: str) -> dict:
    """A fresh worker process runs the chain to its end; the last attempt's row."""
    worker = worker_process(db_url, model)
    try:
        await until(db_url, "SELECT count(*) = 1 FROM executions WHERE status = 'completed'"
                            " AND breadcrumb IS NULL", timeout=60)
    finally:
        assert worker.terminate() == 0, worker.log()
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM executions WHERE status = 'completed'").fetchone()


def assert_continued_once(db_url: str, model: HostileModel, last: dict) -> None:
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    assert last["outcome"] == "done"
    # The retry's model request holds the completed call and its result, not the task afresh.
    retry_request = model.accepted()[-1].body["messages"]
    assert [m["role"] for m in retry_request] == ["system", "user", "assistant", "tool"]
    assert json.loads(retry_request[-1]["content"])["delivered"] is True
    assert (last["usage"]["input_tokens"], last["usage"]["output_tokens"]) == (300, 30)


@pytest.mark.parametrize("stop", ["sigterm", "kill"])
async def test_an_auto_approved_send_is_delivered_once_across_a_stopped_worker(
        api, db_url, model, stop):
    agent = await create_agent(api, f"r13-{stop}", tools=[SEND], auto_approve=[SEND])
    model.queue(*long_turn())
    run_id = await queue_run(api, agent["id"], {"prompt": "Send the weekly report to ops."})
    worker = worker_process(db_url, model)
    await requests_seen(model, 2)  # the send is done; the model is on its long turn
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    if stop == "sigterm":
        assert worker.terminate() == 0, worker.log()  # released past its grace period
    else:
        worker.kill()
        assert await sweep_past_deadlines(db_url) == 1  # lost with its worker: retried
    last = await finish_chain(db_url, model, run_id)
    assert str(last["retry_of"]) == run_id and last["attempt"] == 2
    assert_continued_once(db_url, model, last)


async def test_an_approved_send_is_delivered_once_after_its_worker_is_killed(api, db_url, model):
    agent = await create_agent(api, "r13-approved", tools=[SEND])
    model.queue(*long_turn())
    run_id = await queue_run(api, agent["id"], {"prompt": "Send the weekly report to ops."})
    worker = worker_process(db_url, model)
    try:
        await until(db_url, "SELECT count(*) = 1 FROM approvals WHERE status = 'pending'")
        approval = (await api.get("/v1/approvals")).json()["items"][0]["id"]
        assert (await api.post(f"/v1/approvals/{approval}/approve")).status_code == 200
        await requests_seen(model, 2)  # resumed: the approved send ran; the model thinks
        assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    finally:
        worker.kill()
    assert await sweep_past_deadlines(db_url) == 1
    last = await finish_chain(db_url, model, run_id)
    assert str(last["retry_of"]) == run_id
    assert_continued_once(db_url, model, last)
