"""A worker in this process, against a real Postgres, running scripted agents."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import psycopg
import structlog

from tickwork.scheduler.sweep import sweep_stale
from tickwork.sql import failpoints
from tickwork.sql.db import open_pool
from tickwork.logs import configure_logging
from tickwork.worker.claim import claim_queued_runs, lease_tasks
from tests.factories import DEMO_TOOLS, queue_run, scripted_agent
from tests.integration.workers import running_worker, scalar, until


async def events(api, run_id: str) -> list[dict]:
    response = await api.get(f"/v1/runs/{run_id}/events", headers={"Accept": "application/json"})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def finished(run_id: str) -> tuple[str, tuple]:
    return ("SELECT status IN ('completed', 'failed', 'cancelled') FROM executions WHERE id = %s",
            (run_id,))


async def run_to_end(api, pool, db_url, run_input: dict, tools=DEMO_TOOLS, **settings) -> tuple:
    agent_id = await scripted_agent(api, tools)
    run_id = await queue_run(api, agent_id, run_input)
    async with running_worker(pool, db_url, **settings):
        await until(db_url, *finished(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    return run, await events(api, run_id)


async def test_a_scripted_run_goes_from_queued_to_done_with_every_event_in_order(api, pool, db_url):
    script = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
              {"text": "Record 1 is an invoice."}]
    run, journal = await run_to_end(api, pool, db_url, {"script": script})
    assert (run["status"], run["outcome"]) == ("completed", "done")
    assert run["started_at"] and run["finished_at"]
    assert [e["type"] for e in journal] == [
        "run_start", "step_start", "tool_start", "tool_complete", "step_start", "content_delta",
        "gate_decision", "run_complete"]
    assert [e["seq"] for e in journal] == list(range(1, 9))
    by_seq = {e["seq"]: e for e in journal}
    assert by_seq[3]["parent_seq"] == 2 and by_seq[4]["parent_seq"] == 3
    assert by_seq[6]["parent_seq"] == 5 and by_seq[7]["parent_seq"] == 5
    assert by_seq[8]["parent_seq"] == 1
    assert by_seq[3]["payload"]["tool"] == "demo.get_record"
    assert by_seq[4]["payload"]["ok"] is True
    assert by_seq[6]["payload"]["text"] == "Record 1 is an invoice."
    assert by_seq[7]["payload"]["verdict"] == "done"  # the judge's (scripted) verdict
    assert by_seq[8]["payload"]["outcome"] == "done"


async def test_ten_workers_racing_for_one_queued_run_start_it_once(api, pool, db_url):
    agent_id = await scripted_agent(api)
    run_id = await queue_run(api, agent_id, {"script": [{"text": "Once."}]})
    pools = [await open_pool(db_url, application_name=f"tickwork-test-{i}", max_size=1)
             for i in range(10)]  # ten sessions, as ten workers would have
    try:
        started = await asyncio.gather(*[claim_queued_runs(p, limit=5, worker_id=f"w{i}")
                                         for i, p in enumerate(pools)])
    finally:
        for p in pools:
            await p.close()
    assert sorted(len(rows) for rows in started) == [0] * 9 + [1]
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == 1
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == 1
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE name = %s", (run_id,)) == 0


async def test_a_leftover_leased_run_task_starts_once_and_a_claimed_duplicate_runs_nothing(
        api, pool, db_url):
    # Tasks an older worker leased and never claimed (its lease expired): the one start
    # statement takes them; one whose execution that older worker did claim starts nothing.
    agent_id = await scripted_agent(api)
    leftover = await queue_run(api, agent_id, {"script": [{"text": "Left over."}]})
    claimed_elsewhere = await queue_run(api, agent_id, {"script": [{"text": "Elsewhere."}]})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE queue_tasks SET lease_expires_at = now() - interval '1 second',"
                     " deliveries = 1")
        conn.execute("INSERT INTO execution_claims (execution_id, worker_id) VALUES (%s, 'old')",
                     (claimed_elsewhere,))
    async with running_worker(pool, db_url):
        await until(db_url, *finished(leftover))
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s",
                  (claimed_elsewhere,)) == "queued"
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE execution_id = %s",
                  (claimed_elsewhere,)) == 0
    assert scalar(db_url, "SELECT worker_id FROM execution_claims WHERE execution_id = %s",
                  (claimed_elsewhere,)) == "old"
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE execution_id = %s"
                          " AND type = 'run_complete'", (leftover,)) == 1


async def test_leasing_serves_only_resumes_and_the_one_start_statement_takes_every_run_task(
        api, pool, db_url):
    agent_id = await scripted_agent(api)
    ready = await queue_run(api, agent_id, {"script": [{"text": "Ready."}]})
    expired = await queue_run(api, agent_id, {"script": [{"text": "Expired."}]})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE queue_tasks SET lease_expires_at = now() - interval '1 second'"
                     " WHERE name = %s", (expired,))
    assert await lease_tasks(pool, limit=10, lease_seconds=60) == []
    assert scalar(db_url, "SELECT sum(deliveries) FROM queue_tasks") == 0
    started = await claim_queued_runs(pool, limit=10, worker_id="test")
    assert sorted(str(run.id) for run in started) == sorted([ready, expired])
    for run in started:  # a typed run, built from the claim's row
        assert (run.resume, run.next_seq, run.attempt, run.cancel_requested) == (None, 2, 1, False)
        assert run.agent.tools == DEMO_TOOLS and run.agent.instructions == "Answer from the records."
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0


async def test_a_run_whose_agent_is_gone_fails_in_band_and_removes_its_schedules(api, pool, db_url):
    agent_id = await scripted_agent(api)
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent_id, "cron": "0 9 * * *"})).json()
    run_id = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()["id"]
    # The agent row vanishes behind the API's back (as if deleted by a concurrent process),
    # leaving the schedule, which the run itself must remove.
    with __import__("psycopg").connect(db_url) as conn:
        conn.execute("ALTER TABLE schedules DROP CONSTRAINT schedules_agent_id_fkey")
        conn.execute("DELETE FROM agents WHERE id = %s", (agent_id,))
    async with running_worker(pool, db_url):
        await until(db_url, *finished(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("failed", "failed")
    assert "no longer exists" in run["reason"]
    assert scalar(db_url, "SELECT count(*) FROM schedules") == 0
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE retry_of IS NOT NULL") == 0


async def test_a_large_result_is_offloaded_and_can_be_queried_with_sql(api, pool, db_url):
    script = [{"tool_calls": [{"name": "demo.list_records", "arguments": {"limit": 500}}]},
              {"tool_calls": [{"name": "query_file", "arguments": {
                  "file_ref": "$last_file_ref", "sql": "SELECT count(*) AS n FROM result"}}]},
              {"text": "There are 500."}]
    run, journal = await run_to_end(api, pool, db_url, {"script": script})
    assert run["outcome"] == "done"
    completes = [e["payload"] for e in journal if e["type"] == "tool_complete"]
    assert [c["tool"] for c in completes] == ["demo.list_records", "query_file"]
    assert all(c["ok"] for c in completes)
    assert completes[0]["result_chars"] < 1500  # a preview and a reference, not 500 records
    assert scalar(db_url, "SELECT count(*) FROM tool_results WHERE execution_id = %s",
                  (run["id"],)) == 1


async def test_a_tool_the_agent_does_not_have_is_refused_and_never_runs(api, pool, db_url):
    script = [{"tool_calls": [{"name": "demo.send_message",
                               "arguments": {"recipient": "ops", "text": "hi"}}]},
              {"text": "I could not send it."}]
    run, journal = await run_to_end(api, pool, db_url, {"script": script})
    refusals = [e["payload"] for e in journal if e["type"] == "budget_refusal"]
    assert len(refusals) == 1 and refusals[0]["tool"] == "demo.send_message"
    assert "did NOT execute" in refusals[0]["message"]
    assert not [e for e in journal if e["type"] == "tool_start"]
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0


async def test_a_malformed_script_fails_the_run_in_band_without_a_retry(api, pool, db_url):
    run, journal = await run_to_end(api, pool, db_url, {"script": [{"dance": True}]})
    assert (run["status"], run["outcome"]) == ("failed", "failed")
    assert "ScriptError" in run["reason"]
    assert journal[-1]["type"] == "run_complete"
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1


async def test_runs_slower_than_the_idle_transaction_timeout_finish_normally(api, pool, db_url):
    # Each test database kills sessions idle in a transaction for 2 s; this run spends 2.5 s
    # in each of two model calls, so a transaction held across a call would be killed.
    script = [{"sleep": 2.5}, {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 2}}]},
              {"sleep": 2.5}, {"text": "Done slowly."}]
    run, _ = await run_to_end(api, pool, db_url, {"script": script})
    assert (run["status"], run["outcome"]) == ("completed", "done")


async def test_secrets_are_redacted_before_the_journal_stores_them(api, pool, db_url):
    canary = "sk-live-" + "Q" * 40
    script = [{"tool_calls": [{"name": "demo.search_records",
                               "arguments": {"query": f"password={canary}"}}]},
              {"text": f"Use the key {canary} with Authorization: Bearer {canary}"}]
    _, journal = await run_to_end(api, pool, db_url, {"script": script})
    stored = scalar(db_url, "SELECT string_agg(payload::text, ' ') FROM run_events")
    assert canary not in stored and "[REDACTED:password]" in stored
    assert canary not in str(journal)


async def test_a_late_worker_cannot_overwrite_the_sweeps_verdict(api, pool, db_url):
    agent_id = await scripted_agent(api)
    run_id = await queue_run(api, agent_id, {"script": [{"text": "Finished late."}]},
                             timeout_minutes=1)
    failpoints.arm("run.before_complete_commit", "block:late")
    try:
        async with running_worker(pool, db_url):
            await asyncio.wait_for(failpoints.wait_reached("late"), 60)
            swept = await sweep_stale(pool, now=datetime.now(timezone.utc) + timedelta(minutes=2),
                                      batch_size=10)
            assert (swept.failed, swept.retried) == (1, 1)
            failpoints.release("late")
            await until(db_url, "SELECT count(*) = 1 FROM executions WHERE retry_of = %s"
                                " AND status = 'completed'", (run_id,))
    finally:
        failpoints.disarm_all()
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("failed", "timed_out")
    journal = await events(api, run_id)
    assert journal[-1]["type"] == "run_complete" and journal[-1]["payload"]["by"] == "sweep"
    assert [e["type"] for e in journal].count("run_complete") == 1


async def test_a_run_writes_one_info_line_and_its_start_only_at_debug(api, pool, db_url, capsys,
                                                                       monkeypatch):
    agent_id = await scripted_agent(api, [])
    lines = {}
    try:
        for level in ("info", "debug"):
            monkeypatch.setenv("TICKWORK_LOG_LEVEL", level)
            configure_logging()
            run_id = await queue_run(api, agent_id, {"script": [{"text": "ok"}]})
            async with running_worker(pool, db_url):
                await until(db_url, *finished(run_id))
            lines[level] = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                            if run_id in line]
    finally:
        structlog.reset_defaults()
    [only] = lines["info"]
    assert (only["event"], only["level"], only["status"], only["outcome"], only["attempt"]) == (
        "run_finished", "info", "completed", "done", 1)
    assert only["agent_id"] == agent_id and "schedule_id" in only
    assert [line["event"] for line in lines["debug"]] == ["run_started", "run_finished"]
