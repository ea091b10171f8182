"""R14: a model outage is waited out, not failed. The model endpoint is the hostile server over
real HTTP (tests/hostile_model.py) gone down: connections refused, 503s, 429 with Retry-After.
A run whose model stays down past the provider's quick retries is parked (running, breadcrumb
'parked', no worker, no deadline) with a provider_wait event, and taken back by an unpark task;
only past TICKWORK_PROVIDER_PATIENCE_SECONDS does it fail, with the reason. Patience is short in
these tests, and a long Retry-After's wait is ended by moving the unpark task's available_at
rather than by waiting."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest

from tests.factories import queue_run
from tests.hostile_model import (HostileModel, rate_limited, refused, reply, unavailable)
from tests.integration.test_hostile_model import (ended, hostile_worker, new_agent, of_type,
                                                  why)
from tests.integration.test_worker_runs import events
from tests.integration.workers import WorkerProcess, scalar, until
from tests.integration.test_roles import granted  # noqa: F401 (a fixture)
from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.scheduler.sweep import sweep_stale
from tickwork.sql.db import open_pool

SEND = "demo.send_message"
ANSWER = "Nothing to send today."


@pytest.fixture
def model():
    with HostileModel() as hostile:
        yield hostile


async def until_parked(db_url: str, run_id: str) -> None:
    """Until the run is parked (failing at once if it ends instead)."""
    await until(db_url, "SELECT breadcrumb = 'parked' OR status IN ('completed', 'failed',"
                        " 'cancelled') FROM executions WHERE id = %s", (run_id,))
    assert row(db_url, "SELECT status, breadcrumb, reason FROM executions WHERE id = %s",
               (run_id,))[:2] == ("running", "parked")


def wake_now(db_url: str, run_id: str) -> None:
    """The parked run's wait ends now (instead of after its Retry-After)."""
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE queue_tasks SET available_at = now() WHERE execution_id = %s",
                     (run_id,))


def for_run(marker: str):
    """An outage that only the requests of the run whose prompt holds ``marker`` meet."""
    return lambda body: marker in json.dumps(body)


async def answer(api, run_id: str) -> str:
    """The run's final answer, as its run_complete event carries it."""
    return of_type(await events(api, run_id), "run_complete")[0]["answer"]


def row(db_url: str, sql: str, params: tuple = ()) -> tuple:
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchone()


async def test_an_outage_shorter_than_the_patience_ends_the_run_as_usual(api, pool, db_url,
                                                                         model):
    """Refused connections, then 503s, then a 429 with a Retry-After longer than the in-call
    retries wait: each wait is journaled, and the run ends with its normal outcome."""
    model.queue(reply(ANSWER, usage=(70, 9)), reply("done: nothing to send", usage=(30, 1)))
    agent = await new_agent(api, [SEND])
    model.go_down(refused(1.0), unavailable(1.0), rate_limited(1.0, retry_after="3"))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model, provider_patience_seconds=60):
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    journal = await events(api, run_id)
    assert (run["status"], run["outcome"]) == ("completed", "done"), \
        why(run, model)
    assert await answer(api, run_id) == ANSWER
    waits = of_type(journal, "provider_wait")
    assert waits, "the outage was not waited out"
    assert [w["attempt"] for w in waits] == list(range(1, len(waits) + 1))
    for wait in waits:
        assert wait["wait_seconds"] > 0 and datetime.fromisoformat(wait["until"])
        assert "could not reach" in wait["reason"] or "answered 503" in wait["reason"] \
            or "answered 429" in wait["reason"], wait
    assert len(of_type(journal, "step_start")) == len(waits) + 1  # one per time it asked
    assert run["usage"] == {"input_tokens": 100, "output_tokens": 10, "model_calls": 2}


async def test_refused_connections_park_the_run_until_the_endpoint_is_back(api, pool, db_url,
                                                                            model):
    model.queue(reply(ANSWER), reply("done: nothing to send"))
    agent = await new_agent(api, [SEND])
    model.go_down(refused(600))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model):
        await until_parked(db_url, run_id)
        [wait] = of_type(await events(api, run_id), "provider_wait")
        assert "could not reach" in wait["reason"] and "ConnectError" in wait["reason"], wait
        assert 5 <= wait["wait_seconds"] <= 6  # the first wait at the default patience, spread
        model.recover()
        wake_now(db_url, run_id)
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
    assert await answer(api, run_id) == ANSWER
    assert model.requests == model.accepted()  # none was answered while it was down


async def test_a_parked_run_holds_no_slot_and_another_run_completes_meanwhile(api, pool, db_url,
                                                                              model):
    """Concurrency 1: run A's model is down; A parks and run B, queued after it, runs to its
    end in the only slot; A then resumes and ends with its normal outcome."""
    model.queue(reply(ANSWER), reply("done: nothing to send"),
                reply(ANSWER), reply("done: nothing to send"))
    agent = await new_agent(api, [SEND])
    model.go_down(unavailable(600), affects=for_run("run-A"))
    run_a = await queue_run(api, agent["id"], {"prompt": "run-A: anything to send?"})
    run_b = await queue_run(api, agent["id"], {"prompt": "run-B: anything to send?"})
    async with hostile_worker(pool, db_url, model, concurrency=1, claim_ahead=False):
        await until(db_url, *ended(run_b))
        b = (await api.get(f"/v1/runs/{run_b}")).json()
        assert (b["status"], b["outcome"]) == ("completed", "done"), why(b, model)
        a = (await api.get(f"/v1/runs/{run_a}")).json()
        # Shown as running (it is unfinished and no person is asked anything), parked.
        assert (a["status"], a["breadcrumb"]) == ("running", "parked")
        assert a["started_at"] < b["started_at"]
        model.recover()
        wake_now(db_url, run_a)
        await until(db_url, *ended(run_a))
    a = (await api.get(f"/v1/runs/{run_a}")).json()
    assert (a["status"], a["outcome"]) == ("completed", "done"), why(a, model)
    assert await answer(api, run_a) == ANSWER
    assert b["finished_at"] < a["finished_at"]
    assert len(of_type(await events(api, run_a), "provider_wait")) >= 1


async def test_an_outage_longer_than_the_patience_fails_the_run_with_the_reason(api, pool,
                                                                                db_url, model):
    agent = await new_agent(api, [SEND])
    model.go_down(unavailable(600))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model, provider_patience_seconds=2):
        await until(db_url, *ended(run_id))
    model.recover()
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("failed", "failed")
    assert "stayed unavailable" in run["reason"] and "patience of 2 s" in run["reason"]
    assert "answered 503" in run["reason"], run["reason"]
    journal = await events(api, run_id)
    assert len(of_type(journal, "provider_wait")) >= 1
    assert of_type(journal, "run_complete")[0]["reason"] == run["reason"]
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
    assert scalar(db_url, "SELECT count(*) FROM run_states") == 0


async def test_a_429_with_a_long_retry_after_parks_the_run_and_stops_its_deadline(
        api, pool, db_url, model):
    model.queue(reply(ANSWER), reply("done: nothing to send"))
    agent = await new_agent(api, [SEND])
    model.go_down(rate_limited(600, retry_after="120"))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"},
                             timeout_minutes=1)
    async with hostile_worker(pool, db_url, model):  # the default patience, 900 s
        await until_parked(db_url, run_id)
        token, deadline, ahead, left = row(db_url, (
            "SELECT e.run_token, e.deadline, extract(epoch FROM q.available_at - now()),"
            " (s.state ->> 'deadline_left_seconds')::float8"
            " FROM executions e JOIN queue_tasks q ON q.execution_id = e.id"
            " JOIN run_states s ON s.execution_id = e.id WHERE e.id = %s"), (run_id,))
        assert token is None and deadline is None  # no worker holds it; no deadline runs
        assert ahead >= 119  # Retry-After is honoured as a minimum
        assert 0 < left <= 60
        [wait] = of_type(await events(api, run_id), "provider_wait")
        assert wait["attempt"] == 1 and wait["wait_seconds"] == 120
        assert "429" in wait["reason"] and "Retry-After: 120" in wait["reason"]
        # An hour later by the sweep's clock the parked run is still not timed out.
        swept = await sweep_stale(pool, now=datetime.now(timezone.utc) + timedelta(hours=1),
                                  batch_size=10)
        assert swept.failed == 0
        model.recover()
        with psycopg.connect(db_url) as conn:  # a left-over time the test can tell from any
            conn.execute("UPDATE run_states SET state = state || '{\"deadline_left_seconds\": 7}'")
        woke = scalar(db_url, "SELECT now()")
        wake_now(db_url, run_id)
        await until(db_url, *ended(run_id))
    deadline, finished = row(db_url, "SELECT deadline, finished_at FROM executions"
                                     " WHERE id = %s", (run_id,))
    # Taken back with the 7 s it had left, not a fresh timeout of a minute.
    assert woke + timedelta(seconds=7) <= deadline <= finished + timedelta(seconds=7)
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("completed", "done"), \
        why(run, model)
    assert await answer(api, run_id) == ANSWER


async def test_a_parked_run_is_cancelled_at_once(api, pool, db_url, model):
    agent = await new_agent(api, [SEND])
    model.go_down(rate_limited(600, retry_after="120"))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model):
        await until_parked(db_url, run_id)
        asked = len(model.requests)
        cancelled = await api.post(f"/v1/runs/{run_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        assert (cancelled.json()["status"], cancelled.json()["outcome"]) == ("cancelled",
                                                                            "cancelled")
        assert cancelled.json()["reason"] == "cancelled while waiting out a model outage"
        assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
        assert scalar(db_url, "SELECT count(*) FROM run_states") == 0
    model.recover()
    journal = await events(api, run_id)
    assert of_type(journal, "run_complete")[0]["outcome"] == "cancelled"
    assert len(model.requests) == asked  # never asked again


async def test_a_run_asked_to_stop_before_it_parks_is_taken_back_at_once_and_cancelled(
        api, pool, db_url, model):
    """A cancel asked while the run waits for its model's answer, which then is a 429 with a
    long Retry-After: the park's wait is skipped, and the run ends cancelled at its router."""
    agent = await new_agent(api, [SEND])
    model.go_down(rate_limited(600, retry_after="120", delay=2.0))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model, model_timeout=30):
        assert await asyncio.to_thread(model.arrived.wait, 60)
        asked = await api.post(f"/v1/runs/{run_id}/cancel")
        assert asked.json()["status"] == "running", asked.text  # asked to stop, not parked yet
        await until(db_url, *ended(run_id))
    model.recover()
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("cancelled", "cancelled"), why(run, model)
    [wait] = of_type(await events(api, run_id), "provider_wait")
    assert wait["wait_seconds"] == 120  # and yet taken back at once


async def test_a_judge_outage_parks_the_run_and_the_same_answer_is_judged_after(api, pool,
                                                                                db_url, model):
    """The model answered, then the stop gate's judge was down: taken back, the run asks the
    judge about that answer, not its model for a new one."""
    model.queue(reply(ANSWER), reply("done: nothing to send"))
    agent = await new_agent(api, [SEND])
    model.go_down(unavailable(600), affects=lambda body: body["model"] == "hostile-judge")
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model):
        await until_parked(db_url, run_id)
        model.recover()
        wake_now(db_url, run_id)
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("completed", "done"), \
        why(run, model)
    assert await answer(api, run_id) == ANSWER
    assert [r.body["model"] for r in model.accepted()] == ["hostile-agent", "hostile-judge"]
    assert len(of_type(await events(api, run_id), "step_start")) == 1


async def test_a_parked_run_outlives_its_worker_and_another_takes_it_back(api, db_url, model):
    """Real worker processes: the worker that parked the run is stopped (SIGTERM); nothing is
    released or failed, and a worker started later takes the run back and ends it."""
    model.queue(reply(ANSWER), reply("done: nothing to send"))
    agent = await new_agent(api, [SEND])
    model.go_down(rate_limited(600, retry_after="120"))
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    env = {"TICKWORK_MODELS": "default=openai:hostile-agent,judge=openai:hostile-judge",
           "TICKWORK_OPENAI_BASE_URL": model.base_url, "TICKWORK_OPENAI_TIMEOUT_SECONDS": "2"}
    first = WorkerProcess(db_url, **env)
    try:
        await until_parked(db_url, run_id)
    finally:
        assert first.terminate() == 0, first.log()
    assert row(db_url, "SELECT status, breadcrumb, attempt FROM executions WHERE id = %s",
               (run_id,)) == ("running", "parked", 1)
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1  # no retry minted
    model.recover()
    wake_now(db_url, run_id)
    second = WorkerProcess(db_url, **env)
    try:
        await until(db_url, *ended(run_id))
    finally:
        second.terminate()
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("completed", "done"), \
        (why(run, model), second.log())
    assert await answer(api, run_id) == ANSWER


async def test_parking_taking_back_and_cancelling_work_with_the_roles_own_grants(
        granted, settings, tokens, db_url, model):
    """The worker parks and takes back under tickwork_worker's grants; the API cancels a
    parked run under tickwork_api's (and its row security)."""
    api_pool = await open_pool(granted["tickwork_api"], application_name="tickwork-api")
    worker_pool = await open_pool(granted["tickwork_worker"], application_name="tickwork-worker")
    app = create_app(settings, pool=api_pool)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     headers={"Authorization": f"Bearer {tokens['acme']}"},
                                     base_url="http://api.test") as api:
            model.queue(reply(ANSWER), reply("done: nothing to send"))
            agent = await new_agent(api, [SEND])
            model.go_down(rate_limited(600, retry_after="120"))
            kept = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
            dropped = await queue_run(api, agent["id"], {"prompt": "Anything else?"})
            async with hostile_worker(worker_pool, db_url, model):
                await until_parked(db_url, kept)
                await until_parked(db_url, dropped)
                cancelled = await api.post(f"/v1/runs/{dropped}/cancel")
                assert cancelled.json()["status"] == "cancelled", cancelled.text
                model.recover()
                wake_now(db_url, kept)
                await until(db_url, *ended(kept))
            run = (await api.get(f"/v1/runs/{kept}")).json()
            assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
            assert (await api.get(f"/v1/runs/{dropped}")).json()["status"] == "cancelled"
    finally:
        await stop_hub(app)
        for pool in (api_pool, worker_pool):
            await pool.close()
