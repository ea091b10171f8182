"""Events are readable through the API while the model or a tool is still working (DESIGN
"Visible as it happens"): the journal flushes in the background, not once per turn.

The model's wait and the slow tool are held by events the test controls (an injected sleep and
a test-registered tool), so the run is provably still working when its events are read.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from datetime import timedelta
from uuid import UUID

import pytest

from tickwork.scheduler.sweep import sweep_stale
from tickwork.sql.journal import RunFenced, RunJournal
from tests.factories import queue_run, scripted_agent
from tests.integration.test_worker_runs import events
from tests.integration.workers import run_deps, scalar, until
from tickwork.worker.claim import claim_queued_runs
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.runner import Worker
from tickwork.worker.tools.registry import ToolSpec, arguments_model

SLOW_TOOL = "slowvendor.wait"


class Gate:
    """Something the run waits on (a model call or a tool) until the test opens it."""

    def __init__(self) -> None:
        self.entered, self.opened = asyncio.Event(), asyncio.Event()

    async def wait(self, *_ignored) -> None:
        self.entered.set()
        await self.opened.wait()


def slow_tool(gate: Gate) -> ToolSpec:
    async def wait(context, label: str = "") -> dict:
        await gate.wait()
        return {"waited": True, "label": label}
    return ToolSpec(key=SLOW_TOOL, tool_class="read", is_local=False,
                    description="Waits until the test lets it finish.",
                    parameters={"type": "object", "properties": {"label": {"type": "string"}}},
                    function=wait, arguments=arguments_model(wait))


@asynccontextmanager
async def gated_worker(pool, db_url: str, *, model: Gate | None = None,
                       tool: Gate | None = None, **settings):
    deps = run_deps(pool, **settings)
    if model is not None:  # the scripted provider's {"sleep": s} waits on the gate instead
        deps.provider = build_router(ProviderSettings(models=""), sleep=model.wait)
    if tool is not None:
        deps.catalog[SLOW_TOOL] = slow_tool(tool)
    stop = asyncio.Event()
    worker = Worker(deps, db_url)
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await deps.journal_writer.close()


def has_event(run_id: str, type: str) -> tuple[str, tuple]:
    return ("SELECT EXISTS (SELECT 1 FROM run_events WHERE execution_id = %s AND type = %s)",
            (run_id, type))


async def test_step_start_is_readable_while_the_model_is_still_thinking(api, pool, db_url):
    agent_id = await scripted_agent(api, ["demo.get_record"])
    run_id = await queue_run(api, agent_id, {"script": [{"sleep": 30}, {"text": "Thought."}]})
    model = Gate()
    async with gated_worker(pool, db_url, model=model):
        await until(db_url, *has_event(run_id, "step_start"), timeout=30)
        seen = await events(api, run_id)
        assert model.entered.is_set() and not model.opened.is_set()  # the model is working
        assert [e["type"] for e in seen] == ["run_start", "step_start"]
        assert (await api.get(f"/v1/runs/{run_id}")).json()["status"] == "running"
        model.opened.set()
        await until(db_url, *has_event(run_id, "run_complete"), timeout=30)
    assert [e["type"] for e in await events(api, run_id)] == [
        "run_start", "step_start", "content_delta", "gate_decision", "run_complete"]


async def test_tool_start_is_readable_while_a_slow_tool_is_still_running(api, pool, db_url):
    agent_id = await scripted_agent(api, ["demo.get_record"])
    with __import__("psycopg").connect(db_url) as conn:
        conn.execute("UPDATE agents SET tools = tools || %s::text WHERE id = %s",
                     (SLOW_TOOL, agent_id))
    script = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}},
                              {"name": SLOW_TOOL, "arguments": {"label": "slow"}}]},
              {"text": "Both done."}]
    run_id = await queue_run(api, agent_id, {"script": script})
    tool = Gate()
    async with gated_worker(pool, db_url, tool=tool):
        await until(db_url, "SELECT count(*) = 2 FROM run_events WHERE execution_id = %s"
                            " AND type = 'tool_start'", (run_id,), timeout=30)
        seen = await events(api, run_id)
        assert tool.entered.is_set() and not tool.opened.is_set()  # the tool is working
        assert [e["type"] for e in seen] == [
            "run_start", "step_start", "tool_start", "tool_complete", "tool_start"]
        assert seen[-1]["payload"]["tool"] == SLOW_TOOL
        tool.opened.set()
        await until(db_url, *has_event(run_id, "run_complete"), timeout=30)
    journal = await events(api, run_id)
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert [e["type"] for e in journal].count("tool_complete") == 2


async def test_a_fence_found_by_a_background_flush_stops_the_run_and_the_sweep_verdict_stands(
        api, pool, db_url):
    agent_id = await scripted_agent(api, ["demo.get_record"])
    script = [{"sleep": 30}, {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 2}}]},
              {"text": "Too late."}]
    run_id = await queue_run(api, agent_id, {"script": script}, timeout_minutes=1)
    model = Gate()
    async with gated_worker(pool, db_url, model=model):
        await until(db_url, *has_event(run_id, "step_start"), timeout=30)
        deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
        swept = await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)
        assert (swept.failed, swept.retried) == (1, 1)
        retry = scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s", (run_id,))
        model.opened.set()  # the run goes on, unaware: its next appends are fenced
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (retry,), timeout=30)
    journal = await events(api, run_id)
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert [e["type"] for e in journal] == ["run_start", "step_start", "run_complete"]
    assert journal[-1]["payload"]["outcome"] == "timed_out"
    assert scalar(db_url, "SELECT status || '/' || outcome FROM executions WHERE id = %s",
                  (run_id,)) == "failed/timed_out"
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE execution_id = %s"
                          " AND type = 'tool_start'", (run_id,)) == 0


async def claimed_journal(api, pool, run_input: dict) -> RunJournal:
    """A started run's journal, written by the test itself (no worker)."""
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), run_input)
    [started] = await claim_queued_runs(pool, limit=1, worker_id="test")
    assert str(started.id) == run_id
    return RunJournal(pool, UUID(run_id), started.run_token, next_seq=started.next_seq)


async def test_events_emitted_between_flushes_land_once_each_in_seq_order(api, pool, db_url):
    journal = await claimed_journal(api, pool, {})
    for i in range(120):  # background flushes and explicit ones interleave
        journal.emit("content_delta", {"text": f"part {i}"}, parent=1)
        if i % 7 == 0:
            await asyncio.sleep(0)
        if i % 40 == 39:
            await journal.flush()
    journal.emit("run_complete", {"status": "completed", "outcome": "done"}, parent=1)
    await journal.finish(status="completed", outcome="done")
    stored = await events(api, str(journal.execution_id))
    assert [e["seq"] for e in stored] == list(range(1, 123))
    assert [e["payload"]["text"] for e in stored[1:-1]] == [f"part {i}" for i in range(120)]


async def test_a_fence_found_in_the_background_is_raised_at_the_runs_next_write(api, pool,
                                                                                db_url):
    journal = await claimed_journal(api, pool, {})
    run_id = str(journal.execution_id)
    journal.emit("step_start", {"turn": 1}, parent=1)  # no flush call: the background writes it
    await until(db_url, *has_event(run_id, "step_start"), timeout=30)
    deadline = scalar(db_url, "SELECT deadline FROM executions WHERE id = %s", (run_id,))
    assert (await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)).failed == 1
    journal.emit("content_delta", {"text": "late"}, parent=2)
    await journal.background_idle()  # the background flush meets the fence, keeps it
    with pytest.raises(RunFenced):
        await journal.flush()
    journal.emit("run_complete", {"status": "completed"}, parent=1)
    with pytest.raises(RunFenced):
        await journal.finish(status="completed", outcome="done")
    assert [e["type"] for e in await events(api, run_id)] == [
        "run_start", "step_start", "run_complete"]  # the sweep's verdict, last
    assert scalar(db_url, "SELECT outcome FROM executions WHERE id = %s", (run_id,)) == "timed_out"
