"""Through PgBouncer in transaction mode (Debian's `pgbouncer`, started here) with
TICKWORK_LISTEN_DATABASE_URL pointing past it: a worker process and an API process keep every
pooled statement on the pooler, while wake-ups (LISTEN/NOTIFY) and the worker's presence lock
use the direct connection. The worker polls only once a minute here, so every run it picks up
within the test's wait (ten, one after another) was found by a NOTIFY, not by polling; a tail through the API's pooled
connections sees every event of a run, woken by the same notifications."""

from __future__ import annotations

import pytest

from tests.factories import create_agent
from tests.integration import pgbouncer
from tests.integration.api_process import ApiProcess, tokens_for
from tests.integration.test_db_restart import client
from tests.integration.workers import WorkerProcess, scalar, until
from tests.sse import frames

pytestmark = pytest.mark.skipif(not pgbouncer.available(),
                                reason="Debian's pgbouncer is not installed (.ci/run installs it)")
THROUGH_THE_POOLER = {"TICKWORK_PREPARED_STATEMENTS": "false",  # PgBouncer 1.18 tracks none
                      "TICKWORK_POOL_MIN_SIZE": "2", "TICKWORK_POOL_MAX_SIZE": "4"}


@pytest.fixture
def bouncer(db_url):
    running = pgbouncer.PgBouncer(db_url)
    try:
        yield running
    finally:
        running.stop()


def worker_through(bouncer: pgbouncer.PgBouncer, db_url: str) -> WorkerProcess:
    return WorkerProcess(bouncer.url, TICKWORK_LISTEN_DATABASE_URL=db_url,
                         TICKWORK_POLL_INTERVAL_SECONDS="60", **THROUGH_THE_POOLER)


async def test_a_worker_behind_pgbouncer_is_woken_for_each_run_by_notify(api, db_url, bouncer):
    agent = await create_agent(api, "bounced", tools=["demo.get_record"])
    worker = worker_through(bouncer, db_url)
    try:
        # Its presence lock is held on the direct connection, where a session keeps it.
        await until(db_url, "SELECT count(*) = 1 FROM worker_presences")
        for number in range(1, 11):  # one at a time: each pickup needs its own wake-up
            response = await api.post(f"/v1/agents/{agent['id']}/runs",
                                      json={"input": {"script": [{"text": f"run {number}"}]}})
            assert response.status_code == 202, response.text
            await until(db_url, "SELECT count(*) = %s FROM executions WHERE status = 'completed'",
                        (number,), timeout=30)  # well inside the minute between polls
    finally:
        assert worker.terminate() == 0, worker.log()
    assert "login attempt: db=bounced" in bouncer.log()  # the pooled statements went through it
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE outcome = 'done'") == 10


async def test_a_tail_through_an_api_behind_pgbouncer_sees_every_event(db_url, bouncer, tmp_path):
    tokens = await tokens_for(db_url)
    api = ApiProcess(bouncer.url, tmp_path, TICKWORK_LISTEN_DATABASE_URL=db_url,
                     **THROUGH_THE_POOLER)
    worker = worker_through(bouncer, db_url)
    try:
        await api.ready()
        async with client(api, tokens["admin"]) as http:
            agent = (await http.post("/v1/agents", json={
                "name": "bounced-tail", "tools": ["demo.get_record"]})).json()
            started = await http.post(f"/v1/agents/{agent['id']}/runs", json={"input": {
                "script": [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
                           {"text": "Read it."}]}})
            run_id = started.json()["id"]
            seen = []
            async with http.stream("GET", f"/v1/runs/{run_id}/events") as response:
                assert response.status_code == 200
                async for frame in frames(response):
                    if frame.comment:
                        continue
                    seen.append(frame.json())
                    if frame.event == "run_complete":
                        break
            journal = (await http.get(f"/v1/runs/{run_id}/events",
                                      headers={"Accept": "application/json"})).json()
    finally:
        assert worker.terminate() == 0, worker.log()
        assert api.stop() == 0, api.log()
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
    assert [e["type"] for e in seen][-1] == "run_complete"
    assert len(seen) == len(journal["items"] if isinstance(journal, dict) else journal)
