"""Bursts of run starts against a real `tickwork api` process over real HTTP, where starts share
statements (scheduler/run_batch.py): every accepted start is exactly one run with one queue
task, every refusal queues nothing, and a deploy's SIGTERM in the middle of a burst answers
every request it had accepted and loses none of the runs it answered for."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.factories import create_agent
from tests.integration.api_process import ApiProcess, tokens_for

UNKNOWN = "0190a000-0000-7000-8000-000000000000"
CLIENTS = 48


def stored(db_url: str) -> dict[str, dict]:
    """Every run's input, by id, and how many queue tasks each has."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT e.id::text, e.input, (SELECT count(*) FROM queue_tasks q"
            " WHERE q.execution_id = e.id) FROM executions e").fetchall()
    return {run_id: {"input": run_input, "tasks": tasks} for run_id, run_input, tasks in rows}


async def post_all(http: httpx.AsyncClient, requests: list[tuple[str, dict]]) -> list:
    """Each request's response, or the exception it met; CLIENTS connections at most."""
    slots = asyncio.Semaphore(CLIENTS)

    async def post(path: str, body: dict):
        async with slots:
            try:
                return await http.post(path, json=body)
            except httpx.TransportError as exc:
                return exc

    return await asyncio.gather(*(post(path, body) for path, body in requests))


@pytest.fixture
async def served(db_url, tmp_path: Path):
    """(the API process, a client of it with CLIENTS connections as tenant acme's admin)."""
    tokens = await tokens_for(db_url)
    api = ApiProcess(db_url, tmp_path)
    try:
        await api.ready()
        async with httpx.AsyncClient(base_url=api.base_url, timeout=60,
                                     headers={"Authorization": f"Bearer {tokens['admin']}"},
                                     limits=httpx.Limits(max_connections=CLIENTS)) as http:
            yield api, http
    finally:
        if api.process.poll() is None:
            api.process.terminate()
        api.process.wait(timeout=30)


async def test_a_burst_makes_one_run_per_accepted_start_and_nothing_for_a_refusal(
        served, db_url):
    api, http = served
    active = (await create_agent(http, "active"))["id"]
    paused = (await create_agent(http, "paused", status="paused"))["id"]
    requests = []
    for n in range(300):  # active, active, active, active, paused or unknown, ...
        target = active if n % 5 else (paused if n % 10 else UNKNOWN)
        requests.append((f"/v1/agents/{target}/runs", {"input": {"n": n}}))
    answers = await post_all(http, requests)
    assert api.stop() == 0, api.log()
    statuses = [answer.status_code for answer in answers]
    assert statuses.count(202) == 240 and statuses.count(409) == 30
    assert statuses.count(404) == 30, statuses
    runs = stored(db_url)
    assert len(runs) == 240
    for n, answer in enumerate(answers):
        if answer.status_code == 202:  # its own run, with its own input, queued once
            assert runs[answer.json()["id"]] == {"input": {"n": n}, "tasks": 1}
    assert "database_error" not in api.log() and "Traceback" not in api.log()


async def test_sigterm_in_a_burst_answers_what_it_accepted_and_loses_no_answered_run(
        served, db_url):
    api, http = served
    agent = (await create_agent(http, "deployed"))["id"]
    burst = asyncio.create_task(post_all(
        http, [(f"/v1/agents/{agent}/runs", {"input": {"n": n}}) for n in range(2000)]))
    with psycopg.connect(db_url, autocommit=True) as conn:
        async with asyncio.timeout(60):  # SIGTERM once the burst is well under way
            while conn.execute("SELECT count(*) FROM executions").fetchone()[0] < 200:
                await asyncio.sleep(0.01)
    api.process.send_signal(signal.SIGTERM)
    answers = await burst
    assert api.process.wait(timeout=30) == 0, api.log()
    accepted = [answer for answer in answers if not isinstance(answer, Exception)]
    assert all(answer.status_code == 202 for answer in accepted), \
        {answer.status_code for answer in accepted}
    runs = stored(db_url)
    # Every run the API made was answered for (no start committed and then dropped), and each
    # answered run is there once, with its own input and one queue task.
    assert len(runs) == len(accepted) >= 200
    for answer in accepted:
        run = answer.json()
        assert runs[run["id"]] == {"input": run["input"], "tasks": 1}
    assert len(accepted) < 2000  # the stop came in the middle of the burst
