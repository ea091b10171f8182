"""What people see of usage and run control on the command line: `tickwork runs` shows tokens
and a run waiting for approval as such; `tickwork tail` ends with the run's usage. The CLI runs
as a real process against the API served by uvicorn."""

from __future__ import annotations

import asyncio
import json
import os

from tests.integration.drivers import ROOT
from tests.integration.test_cli_tail import TICKWORK, finish, live  # noqa: F401  (fixture)
from tests.integration.test_run_control import TOOLS, start_by_hand, terminal
from tickwork.sql.journal import RunJournal
from tickwork.worker.claim import claim_queued_runs


async def cli(live, token: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "TICKWORK_API_URL": live.url, "TICKWORK_TOKEN": token, "COLUMNS": "250"}
    process = await asyncio.create_subprocess_exec(
        *TICKWORK, *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    return await finish(process)


def row_of(out: str, run_id: str) -> str:
    [row] = [line for line in out.splitlines() if run_id in line]
    return row


async def test_runs_shows_tokens_and_a_run_waiting_for_approval(api, pool, live):
    done_id, journal = await start_by_hand(api, pool)
    terminal(journal, {})
    await journal.finish(status="completed", outcome="done",
                         usage={"input_tokens": 12345, "output_tokens": 678, "model_calls": 4})
    waiting_id, journal = await start_by_hand(api, pool)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{waiting_id}:c1",
                          tool_call_id="c1", tool="demo.send_message", arguments={},
                          usage={"input_tokens": 50, "output_tokens": 5, "model_calls": 1})

    code, out, err = await cli(live, api.tokens["acme"], "runs")
    assert code == 0, err
    assert "tokens in/out" in out
    done_row, waiting_row = row_of(out, done_id), row_of(out, waiting_id)
    assert "completed" in done_row and "done" in done_row and "12,345 / 678" in done_row
    assert "waiting for approval" in waiting_row and "completed" not in waiting_row
    assert "50 / 5" in waiting_row

    assert (await api.post(f"/v1/runs/{waiting_id}/cancel")).status_code == 202
    code, out, err = await cli(live, api.tokens["acme"], "runs")
    assert code == 0, err
    assert "cancelled" in row_of(out, waiting_id)


async def test_tail_ends_with_the_runs_usage(api, pool, live):
    run_id, journal = await start_by_hand(api, pool)
    step = journal.emit("step_start", {"turn": 1})
    journal.emit("model_usage", {"alias": "default", "input_tokens": 2000, "output_tokens": 30},
                 parent=step)
    journal.emit("content_delta", {"text": "All done."}, parent=step)
    journal.emit("model_usage", {"alias": "judge", "input_tokens": 100, "output_tokens": 2},
                 parent=step)
    journal.emit("run_complete", {"status": "completed", "outcome": "done"}, parent=1)
    await journal.finish(status="completed", outcome="done",
                         usage={"input_tokens": 2100, "output_tokens": 32, "model_calls": 2})

    code, out, err = await cli(live, api.tokens["acme"], "tail", run_id)
    assert code == 0, err
    lines = out.rstrip().splitlines()
    assert lines[-1] == "usage: 2,100 tokens in, 32 out, 2 model calls"
    assert "All done." in lines and "model_usage" not in out


async def test_a_tail_left_open_on_a_waiting_run_closes_when_the_run_is_cancelled(api, pool, live):
    run_id, journal = await start_by_hand(api, pool)
    journal.emit("approval_required", {"approval_id": f"{run_id}:c1", "tool": "demo.send_message"},
                 parent=1)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{run_id}:c1",
                          tool_call_id="c1", tool="demo.send_message", arguments={})
    env = {**os.environ, "TICKWORK_API_URL": live.url, "TICKWORK_TOKEN": api.tokens["acme"]}
    process = await asyncio.create_subprocess_exec(
        *TICKWORK, "tail", run_id, "--json", cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    seen = []
    while not seen or seen[-1]["type"] != "approval_required":  # the tail is live and waiting
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line, (await process.stderr.read()).decode()
        seen.append(json.loads(line))
    assert process.returncode is None

    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
    code, out, err = await finish(process, timeout=30)
    [end] = [json.loads(line) for line in out.splitlines()]
    assert (end["type"], end["payload"]["outcome"]) == ("run_complete", "cancelled")
    assert code == 1, err  # the run did not end done


async def test_runs_status_waiting_and_schedule_history_show_the_waiting_run(api, pool, live):
    """`tickwork runs --status waiting` lists exactly the runs waiting for a person, `--status
    completed` leaves them out, and `schedule history` shows the waiting run as waiting."""
    agent = (await api.post("/v1/agents", json={"name": "waits", "tools": TOOLS})).json()
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"],
                                                      "cron": "0 9 * * *"})).json()
    waiting_id = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()["id"]
    [run] = await claim_queued_runs(pool, limit=10, worker_id="test")
    journal = RunJournal(pool, run.id, run.run_token, next_seq=run.next_seq)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{waiting_id}:c1",
                          tool_call_id="c1", tool="demo.send_message", arguments={})
    done_id, journal = await start_by_hand(api, pool)
    terminal(journal, {})
    await journal.finish(status="completed", outcome="done")

    token = api.tokens["acme"]
    code, out, err = await cli(live, token, "runs", "--status", "waiting", "--json")
    assert code == 0, err
    assert [(r["id"], r["status"]) for r in json.loads(out)["items"]] == [(waiting_id, "waiting")]
    code, out, err = await cli(live, token, "runs", "--status", "completed", "--json")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)["items"]] == [done_id]
    code, out, err = await cli(live, token, "schedule", "history", schedule["id"], "--json")
    assert code == 0, err
    assert [(h["execution_id"], h["status"]) for h in json.loads(out)["items"]] == [
        (waiting_id, "waiting")]
    code, out, err = await cli(live, token, "schedule", "history", schedule["id"])
    assert code == 0, err
    assert "waiting" in row_of(out, waiting_id) and "completed" not in row_of(out, waiting_id)
