"""GET /v1/stats/runs-per-minute: the viewer's chart data, one tenant's runs per minute by
outcome over the last hour, every minute listed."""

from __future__ import annotations

import psycopg

from tickwork.scheduler.serialize import utc_text
from tests.factories import queue_run
from tests.integration.api_checks import assert_error


def backdate(db_url: str, run_id: str, minutes_ago: int, status: str, outcome: str | None):
    """Move a run back in time and end it as the worker would have; returns its minute."""
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "UPDATE executions SET created_at = now() - make_interval(mins => %s),"
            " status = %s, outcome = %s WHERE id = %s"
            " RETURNING date_trunc('minute', created_at)",
            (minutes_ago, status, outcome, run_id)).fetchone()[0]


def minute_of(db_url: str, run_id: str):
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT date_trunc('minute', created_at) FROM executions"
                            " WHERE id = %s", (run_id,)).fetchone()[0]


async def test_runs_per_minute_counts_the_tenants_runs_of_the_last_hour_by_outcome(api, db_url):
    agent = (await api.post("/v1/agents", json={"name": "counted"})).json()["id"]
    done, failed, old, queued = [await queue_run(api, agent) for _ in range(4)]
    half_hour = backdate(db_url, done, 30, "completed", "done")
    assert backdate(db_url, failed, 30, "failed", "failed") == half_hour
    backdate(db_url, old, 70, "completed", "done")  # before the window
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    theirs = (await api.post("/v1/agents", json={"name": "theirs"}, headers=globex)).json()["id"]
    await queue_run(api, theirs, headers=globex)  # another tenant's run, this minute

    response = await api.get("/v1/stats/runs-per-minute")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["minutes"] == 60 and len(body["items"]) == 60
    assert body["since"] == body["items"][0]["minute"]
    by_minute = {item["minute"]: item["counts"] for item in body["items"]}
    assert by_minute[utc_text(half_hour)] == {"done": 1, "failed": 1}
    assert by_minute[utc_text(minute_of(db_url, queued))] == {"queued": 1}
    assert sum(sum(counts.values()) for counts in by_minute.values()) == 3


async def test_runs_per_minute_takes_a_window_and_refuses_a_bad_one(api, db_url):
    agent = (await api.post("/v1/agents", json={"name": "counted"})).json()["id"]
    run = await queue_run(api, agent)
    backdate(db_url, run, 70, "cancelled", "cancelled")
    body = (await api.get("/v1/stats/runs-per-minute", params={"minutes": 90})).json()
    assert len(body["items"]) == 90
    assert sum(sum(item["counts"].values()) for item in body["items"]) == 1
    for bad in ("0", "1441", "soon"):
        error = assert_error(await api.get("/v1/stats/runs-per-minute",
                                           params={"minutes": bad}), 422)
        assert "minutes" in error["message"], error


async def test_runs_per_minute_needs_a_token(api):
    response = await api.get("/v1/stats/runs-per-minute", headers={"Authorization": ""})
    assert_error(response, 401)
