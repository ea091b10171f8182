"""Every list verb of `tickwork` as a script reads it: with --json, exactly one JSON document
`{"items": [...]}` on stdout and nothing else; without it, tables with whole ids, agent names
and local times; errors that name the flag the user typed. The CLI runs as a real process
against the API served by uvicorn."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg

from tests.integration.test_cli_tail import live  # noqa: F401  (fixture)
from tests.integration.test_run_control import start_by_hand
from tests.integration.test_run_control_cli import cli


async def one_document(live, token: str, *args: str) -> list[dict]:
    code, out, err = await cli(live, token, *args, "--json")
    assert code == 0, err
    document = json.loads(out)  # the whole of stdout is one document: a second would not parse
    assert list(document) == ["items"]
    return document["items"]


async def waiting_run(api, pool) -> str:
    run_id, journal = await start_by_hand(api, pool)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{run_id}:call_1_0",
                          tool_call_id="call_1_0", tool="demo.send_message",
                          arguments={"to": "ops"})
    return run_id


async def test_each_list_verb_prints_one_json_document_of_the_apis_items(api, pool, db_url,
                                                                        live):
    token = api.tokens["acme"]
    run_id = await waiting_run(api, pool)
    [agent] = (await api.get("/v1/agents")).json()["items"]
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"],
                                                      "cron": "0 9 * * *"})).json()
    queued = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()
    fire = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=1)
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = conn.execute("SELECT tenant_id FROM agents WHERE id = %s",
                              (agent["id"],)).fetchone()[0]
        conn.execute("INSERT INTO skipped_fires (schedule_id, scheduled_for, tenant_id, reason,"
                     " execution_id) VALUES (%s, %s, %s, 'coalesced', %s)",
                     (schedule["id"], fire, tenant, queued["id"]))

    assert await one_document(live, token, "agent", "list") == [agent]
    assert await one_document(live, token, "schedule", "list") == \
        (await api.get("/v1/schedules")).json()["items"]
    runs = await one_document(live, token, "runs")
    assert [r["id"] for r in runs] == [queued["id"], run_id]
    assert runs == (await api.get("/v1/runs")).json()["items"]
    [approval] = await one_document(live, token, "approvals")
    assert (approval["id"], approval["tool"], approval["status"]) == (
        f"{run_id}:call_1_0", "demo.send_message", "pending")
    assert await one_document(live, token, "approvals", "--status", "approved") == []
    history = await one_document(live, token, "schedule", "history", schedule["id"])
    assert [(h["kind"], h["reason"], h["execution_id"]) for h in history] == [
        ("execution", "manual", queued["id"]), ("skipped_fire", "coalesced", queued["id"])]


async def test_tables_show_whole_ids_agent_names_local_times_and_why_a_fire_was_skipped(
        api, pool, db_url, live):
    token = api.tokens["acme"]
    run_id = await waiting_run(api, pool)
    [agent] = (await api.get("/v1/agents")).json()["items"]
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"],
                                                      "cron": "30 4 * * 2"})).json()
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = conn.execute("SELECT tenant_id FROM agents WHERE id = %s",
                              (agent["id"],)).fetchone()[0]
        conn.execute("INSERT INTO skipped_fires (schedule_id, scheduled_for, tenant_id, reason)"
                     " VALUES (%s, '2026-07-07T04:30:00Z', %s, 'overlap')",
                     (schedule["id"], tenant))

    code, out, err = await cli(live, token, "schedule", "list", "--zone", "America/New_York")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if schedule["id"] in line]  # whole, on one line
    assert agent["name"] in row and agent["id"] not in row
    assert "30 4 * * 2" in row and ("EDT" in row or "EST" in row)

    code, out, err = await cli(live, token, "runs", "--zone", "Asia/Tokyo")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if run_id in line]
    assert agent["name"] in row and "waiting for approval" in row and "JST" in row

    code, out, err = await cli(live, token, "approvals")
    assert code == 0, err
    assert f"{run_id}:call_1_0" in out  # the id `tickwork approve` takes, whole

    code, out, err = await cli(live, token, "schedule", "history", schedule["id"], "--zone",
                               "America/New_York")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if "2026-07-07" in line]
    assert "00:30 EDT" in row and "previous run was still unfinished" in row


async def test_errors_name_the_flag_the_user_typed_and_queue_nothing(api, pool, db_url, live):
    token = api.tokens["acme"]
    agent = (await api.post("/v1/agents", json={"name": "flagged"})).json()
    code, out, err = await cli(live, token, "run", "flagged", "--timeout", "20")
    assert code == 1 and out == ""
    assert "--timeout must be between 1 and 15 minutes" in err and "timeout_minutes" not in err
    code, _, err = await cli(live, token, "schedule", "add", "flagged", "--daily", "09:00",
                             "--timeout", "0")
    assert code == 1 and "--timeout" in err
    code, _, err = await cli(live, token, "runs", "--limit", "500")
    assert code == 1 and "--limit must be between 1 and" in err
    code, _, err = await cli(live, token, "runs", "--status", "done")
    assert code == 1 and err.startswith("error: --status must be") and "Input should" not in err
    code, _, err = await cli(live, token, "cancel", "nope")
    assert code == 1 and "RUN_ID is not a valid id; copy one from `tickwork runs`" in err
    code, _, err = await cli(live, token, "approve", "nope")
    assert code == 1 and "APPROVAL_ID is not a valid id" in err and "pattern" not in err
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions WHERE agent_id = %s",
                            (agent["id"],)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM schedules").fetchone()[0] == 0


async def test_token_list_json_is_one_document_without_the_tokens(db_url, tokens):
    import asyncio
    import os

    from tests.integration.drivers import ROOT
    from tests.integration.test_cli_tail import TICKWORK, finish

    env = {**os.environ, "TICKWORK_DATABASE_URL": db_url}
    process = await asyncio.create_subprocess_exec(
        *TICKWORK, "token", "list", "--json", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    code, out, err = await finish(process)
    assert code == 0, err
    items = json.loads(out)["items"]
    assert sorted(t["tenant"] or "(operator)" for t in items) == ["(operator)", "acme", "globex"]
    assert not any(secret in out for secret in tokens.values())
