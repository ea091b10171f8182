"""The walls, the stop gate, approvals and cancel, end to end through a real worker."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg

from tickwork.scheduler.sweep import sweep_stale
from tests.factories import queue_run, scripted_agent
from tests.integration.test_worker_runs import events
from tests.integration.workers import WorkerProcess, running_worker, scalar, until


def done(run_id: str) -> tuple[str, tuple]:
    return ("SELECT status IN ('completed', 'failed', 'cancelled') AND breadcrumb IS NULL"
            " FROM executions WHERE id = %s", (run_id,))


def suspended(run_id: str) -> tuple[str, tuple]:
    return ("SELECT breadcrumb = 'suspended' FROM executions WHERE id = %s", (run_id,))


async def run(api, pool, db_url, run_input, tools=("demo.get_record",), auto_approve=(), name="a"):
    response = await api.post("/v1/agents", json={"name": name, "tools": list(tools),
                                                  "auto_approve": list(auto_approve)})
    run_id = await queue_run(api, response.json()["id"], run_input)
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    return (await api.get(f"/v1/runs/{run_id}")).json(), await events(api, run_id)


def of_type(journal, kind):
    return [e["payload"] for e in journal if e["type"] == kind]


async def test_a_runaway_per_record_loop_is_refused_then_hard_stopped_with_a_message(api, pool, db_url):
    loop = {"script": [{"repeat": {"tool": "demo.get_record", "times": 500, "vary": "id"}}]}
    result, journal = await run(api, pool, db_url, loop)
    assert (result["status"], result["outcome"]) == ("completed", "hard_stop")
    assert len(of_type(journal, "tool_start")) == 40
    refusals = of_type(journal, "budget_refusal")
    assert len(refusals) == 60 and {r["wall"] for r in refusals} == {"per_tool"}
    assert all("did NOT execute" in r["message"] for r in refusals)
    final = [p for p in of_type(journal, "content_delta") if p.get("injected")]
    assert len(final) == 1 and "100" in final[0]["text"]
    assert of_type(journal, "gate_decision")[-1]["verdict"] == "hard_stop"
    assert journal[-1]["type"] == "run_complete"


async def test_a_narrated_but_not_done_stop_is_sent_back_and_then_accepted(api, pool, db_url):
    script = {"script": [{"text": "I have updated the records."}, {"text": "Record 1 is an invoice."}],
              "judge": ["stalled: no tool was called to update anything", "done"]}
    result, journal = await run(api, pool, db_url, script)
    gates = of_type(journal, "gate_decision")
    assert [g["verdict"] for g in gates] == ["stalled", "done"]
    assert "no tool was called" in gates[0]["injected"]
    assert gates[0]["units_left"] == 19
    assert result["outcome"] == "done"


async def test_a_genuine_question_ends_the_run_as_a_question(api, pool, db_url):
    result, journal = await run(api, pool, db_url, {"script": [{"text": "Which region?"}],
                                                    "judge": ["question"]})
    assert result["outcome"] == "question"
    assert of_type(journal, "gate_decision")[0]["verdict"] == "question"


async def test_an_unparseable_verdict_counts_as_stalled(api, pool, db_url):
    result, journal = await run(api, pool, db_url, {"script": [{"text": "Hm."}],
                                                    "judge": ["maybe?", "done"]})
    assert [g["verdict"] for g in of_type(journal, "gate_decision")] == ["stalled", "done"]


async def test_a_run_that_keeps_stalling_lands_with_a_wrap_up_after_twenty_units(api, pool, db_url):
    result, journal = await run(api, pool, db_url, {"script": [{"text": "Working on it."}],
                                                    "judge": ["stalled"]})
    gates = of_type(journal, "gate_decision")
    assert len(gates) == 21 and gates[-1]["verdict"] == "stalled_out"
    assert "wrap up" in gates[-2]["injected"]
    assert result["outcome"] == "stalled_out"


async def test_an_open_plan_step_is_injected_and_then_the_plan_alone_ends_the_run(api, pool, db_url):
    plan = lambda b: {"name": "update_plan", "arguments": {"steps": [
        {"title": "fetch record 1", "status": "completed"},
        {"title": "summarise it", "status": b}]}}
    script = {"script": [{"tool_calls": [plan("pending")]}, {"text": "All done."},
                         {"tool_calls": [plan("completed")]}, {"text": "Summary: an invoice."}],
              "judge": ["stalled: the judge must not be asked while a plan exists"]}
    result, journal = await run(api, pool, db_url, script, tools=("update_plan",))
    gates = of_type(journal, "gate_decision")
    assert [g["verdict"] for g in gates] == ["plan_open", "plan_complete"]
    assert "summarise it" in gates[0]["injected"]
    assert result["outcome"] == "done"


async def paused_run(api, pool, db_url, auto_approve=()):
    agent = await api.post("/v1/agents", json={"name": "sender", "tools": ["demo.send_message"],
                                               "auto_approve": list(auto_approve)})
    script = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                          "arguments": {"recipient": "ops", "text": "report"}}]},
                         {"text": "Handled."}]}
    run_id = await queue_run(api, agent.json()["id"], script)
    async with running_worker(pool, db_url):
        await until(db_url, *suspended(run_id))
    return run_id


async def test_a_send_waits_for_approval_then_runs_exactly_once(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    pending = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
    assert len(pending) == 1 and pending[0]["tool"] == "demo.send_message"
    assert pending[0]["id"].startswith(f"{run_id}:")
    before = await events(api, run_id)
    assert before[-1]["type"] == "approval_required" and not of_type(before, "run_complete")
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["breadcrumb"], run["outcome"]) == ("waiting", "suspended", None)
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0
    decided = await api.post(f"/v1/approvals/{pending[0]['id']}/approve")
    assert decided.status_code == 200 and decided.json()["status"] == "approved"
    again = await api.post(f"/v1/approvals/{pending[0]['id']}/approve")
    assert again.status_code == 409
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    after = await events(api, run_id)
    assert [e["seq"] for e in after] == list(range(1, len(after) + 1))
    assert after[len(before)]["seq"] == before[-1]["seq"] + 1
    assert of_type(after, "tool_start")[0]["approval_id"] == pending[0]["id"]
    assert [e["type"] for e in after].count("run_complete") == 1
    assert (await api.get(f"/v1/runs/{run_id}")).json()["outcome"] == "done"


async def test_a_rejected_send_never_runs_and_the_model_is_told_no(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    approval = (await api.get("/v1/approvals")).json()["items"][0]
    rejected = await api.post(f"/v1/approvals/{approval['id']}/reject", json={"reason": "not today"})
    assert rejected.json()["status"] == "rejected"
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0
    refusal = of_type(await events(api, run_id), "budget_refusal")
    assert refusal[0]["wall"] == "approval_rejected" and "not today" in refusal[0]["message"]
    assert "did NOT execute" in refusal[0]["message"]
    assert (await api.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"


async def test_approve_and_reject_at_the_same_instant_store_exactly_one_decision(api, pool, db_url):
    await paused_run(api, pool, db_url)
    approval_id = (await api.get("/v1/approvals")).json()["items"][0]["id"]
    answers = await asyncio.gather(api.post(f"/v1/approvals/{approval_id}/approve"),
                                   api.post(f"/v1/approvals/{approval_id}/reject"))
    assert sorted(a.status_code for a in answers) == [200, 409]
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE kind = 'resume'") == 1


async def test_an_auto_approved_send_runs_without_a_pause_and_says_so(api, pool, db_url):
    agent = await api.post("/v1/agents", json={"name": "trusted", "tools": ["demo.send_message"],
                                               "auto_approve": ["demo.send_message"]})
    script = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                          "arguments": {"recipient": "ops", "text": "hi"}}]},
                         {"text": "Sent."}]}
    run_id = await queue_run(api, agent.json()["id"], script)
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    assert of_type(await events(api, run_id), "tool_start")[0]["auto_approved"] is True
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1


async def test_a_paused_run_is_never_swept_and_still_resumes(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    swept = await sweep_stale(pool, now=datetime.now(timezone.utc) + timedelta(minutes=16),
                              batch_size=10)
    assert swept.failed == 0
    approval_id = (await api.get("/v1/approvals")).json()["items"][0]["id"]
    await api.post(f"/v1/approvals/{approval_id}/approve")
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1


async def test_an_approval_survives_a_killed_worker(api, pool, db_url):
    agent = await api.post("/v1/agents", json={"name": "sender", "tools": ["demo.send_message"]})
    script = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                          "arguments": {"recipient": "ops", "text": "x"}}]},
                         {"text": "Done."}]}
    run_id = await queue_run(api, agent.json()["id"], script)
    first = WorkerProcess(db_url)
    await until(db_url, *suspended(run_id))
    first.kill()
    approval_id = (await api.get("/v1/approvals")).json()["items"][0]["id"]
    await api.post(f"/v1/approvals/{approval_id}/approve")
    second = WorkerProcess(db_url)
    await until(db_url, *done(run_id))
    assert second.terminate() == 0
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == 1


async def test_unreadable_saved_state_fails_the_resume_in_band_without_a_retry(api, pool, db_url):
    run_id = await paused_run(api, pool, db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE run_states SET state = jsonb_set(state, '{version}', '99')")
    approval_id = (await api.get("/v1/approvals")).json()["items"][0]["id"]
    await api.post(f"/v1/approvals/{approval_id}/approve")
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("failed", "failed") and "version" in run["reason"]
    assert [e["type"] for e in await events(api, run_id)].count("run_complete") == 1
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0


async def test_cancel_ends_a_queued_run_at_once_and_a_running_one_at_its_next_turn(api, pool, db_url):
    agent_id = await scripted_agent(api, tools=["demo.get_record"], name="c")
    queued = await queue_run(api, agent_id, {"script": [{"text": "never"}]})
    cancelled = await api.post(f"/v1/runs/{queued}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0
    assert (await api.post(f"/v1/runs/{queued}/cancel")).status_code == 409
    slow = await queue_run(api, agent_id, {"script": [
        {"sleep": 1.5}, {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
        {"text": "should not get here"}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT status = 'running' FROM executions WHERE id = %s", (slow,))
        assert (await api.post(f"/v1/runs/{slow}/cancel")).status_code == 202
        await until(db_url, *done(slow))
    run = (await api.get(f"/v1/runs/{slow}")).json()
    assert (run["status"], run["outcome"]) == ("cancelled", "cancelled")
    assert of_type(await events(api, slow), "gate_decision")[-1]["verdict"] == "cancelled"


async def test_another_tenants_approval_is_a_404_and_stays_pending(api, pool, db_url):
    await paused_run(api, pool, db_url)
    approval_id = (await api.get("/v1/approvals")).json()["items"][0]["id"]
    other = {"Authorization": f"Bearer {api.tokens['globex']}"}
    assert (await api.get("/v1/approvals", headers=other)).json()["items"] == []
    for verb in ("approve", "reject"):
        response = await api.post(f"/v1/approvals/{approval_id}/{verb}", headers=other)
        assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert scalar(db_url, "SELECT status FROM approvals") == "pending"
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE kind = 'resume'") == 0
