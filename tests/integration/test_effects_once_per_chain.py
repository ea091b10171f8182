"""An effect happens once per run chain (DESIGN "Runs keep their promises across retries and
outages", RELIABILITY R13): a retry after a release, a deadline or a lost worker continues from
the last durable step of the attempt it replaces, never from scratch. A call whose effect
completed is not made again, the vendor idempotency key is the same in every attempt, and the
chain's usage counts every attempt. These run workers in this process; the same promises with
real worker processes, SIGTERM, kill -9 and the hostile model server over HTTP are in
test_effects_once_per_chain_processes.py.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.rows import dict_row

from tests.factories import queue_run
from tests.integration.test_deploy import agent
from tests.integration.test_visible_events import Gate
from tests.integration.test_worker_runs import events
from tests.integration.workers import run_deps, scalar, serving, until
from tickwork.scheduler.sweep import sweep_once
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.tools.registry import ToolSpec, arguments_model

SEND = {"name": "demo.send_message", "arguments": {"recipient": "ops", "text": "weekly report"}}
KEYED = "keyedvendor.send"


class Recording:
    """The scripted models, with every agent-turn request kept (what the model was sent)."""

    def __init__(self, inner) -> None:
        self.inner, self.sent = inner, []

    async def complete(self, alias, messages, tools, view, on_text=None):
        if alias != "judge":
            self.sent.append([(m.role, m.content, m.tool_call_id) for m in messages])
        return await self.inner.complete(alias, messages, tools, view, on_text=on_text)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@asynccontextmanager
async def worker(pool, db_url, *, model: Gate, tool_spec: ToolSpec | None = None, **settings):
    deps = run_deps(pool, **settings)
    deps.provider = recording = Recording(
        build_router(ProviderSettings(models=""), sleep=model.wait))
    if tool_spec is not None:
        deps.catalog[tool_spec.key] = tool_spec
    async with serving(deps, db_url):
        yield recording


def opened() -> Gate:
    gate = Gate()
    gate.opened.set()
    return gate


def keyed_send(keys: list[str], gate: Gate) -> ToolSpec:
    """A send-class vendor tool that notes the idempotency key of every call it gets, and
    waits on ``gate`` before it answers (its effect done, its result not yet recorded)."""
    async def send(context, text: str = "") -> dict:
        keys.append(context.idempotency_key)
        await gate.wait()
        return {"delivered": True}
    return ToolSpec(key=KEYED, tool_class="send", is_local=False, description="Send once.",
                    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
                    function=send, arguments=arguments_model(send))


def retry_of(db_url: str, run_id) -> str:
    return str(scalar(db_url, "SELECT id FROM executions WHERE retry_of = %s", (run_id,)))


async def send_then_think(api) -> str:
    """A run whose auto-approved send completes, then whose model takes a long turn."""
    agent_id = await agent(api, ["demo.send_message"], auto_approve=["demo.send_message"])
    return await queue_run(api, agent_id, {"script": [
        {"tool_calls": [SEND], "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"sleep": 30},
        {"text": "Sent the weekly report.", "usage": {"input_tokens": 200, "output_tokens": 20}}]})


async def test_a_released_run_s_retry_continues_after_its_completed_send(api, pool, db_url):
    run_id = await send_then_think(api)
    thinking = Gate()
    async with worker(pool, db_url, model=thinking, shutdown_grace_seconds=0):
        await asyncio.wait_for(thinking.entered.wait(), 30)  # sent; the model is thinking
        assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1
    retry_id = retry_of(db_url, run_id)
    assert scalar(db_url, "SELECT breadcrumb FROM executions WHERE id = %s", (run_id,)) == "released"
    async with worker(pool, db_url, model=opened()) as model:
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (retry_id,), timeout=30)
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1  # sent once in the chain
    # The retry's model was sent the completed call and its result, not the task afresh.
    [first_request] = model.sent
    assert [role for role, _, _ in first_request] == ["system", "user", "assistant", "tool"]
    assert '"delivered":true' in first_request[-1][1]
    journal = await events(api, retry_id)
    assert "tool_start" not in [e["type"] for e in journal]  # nothing called again
    outcome, answer_usage = scalar(db_url, "SELECT array[outcome, usage::text] FROM executions"
                                           " WHERE id = %s", (retry_id,))
    assert outcome == "done"
    usage = __import__("json").loads(answer_usage)
    # Both attempts' model calls (the released one's first turn included).
    assert (usage["input_tokens"], usage["output_tokens"]) == (300, 30)


async def test_a_timed_out_run_s_retry_does_not_send_again(api, pool, db_url):
    run_id = await send_then_think(api)
    thinking = Gate()
    async with worker(pool, db_url, model=thinking):
        await asyncio.wait_for(thinking.entered.wait(), 30)
        later = datetime.now(timezone.utc) + timedelta(hours=2)  # past the run's deadline
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True,
                                                         row_factory=dict_row) as conn:
            swept = await sweep_once(conn, now=later, limit=10)
        assert swept.failed == 1
        thinking.opened.set()  # the old attempt wakes up fenced: its verdict was given
    retry_id = retry_of(db_url, run_id)
    async with worker(pool, db_url, model=opened()):
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (retry_id,), timeout=30)
    assert scalar(db_url, "SELECT outcome FROM executions WHERE id = %s", (run_id,)) == "timed_out"
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1


async def test_a_call_whose_result_was_never_recorded_is_made_again_with_the_same_key(
        api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    with psycopg.connect(db_url) as conn:  # a vendor of this test only: not in the catalog
        conn.execute("UPDATE agents SET tools = tools || %s::text,"
                     " auto_approve = auto_approve || %s::text WHERE id = %s",
                     (KEYED, KEYED, agent_id))
    run_id = await queue_run(api, agent_id, {"script": [
        {"tool_calls": [{"name": KEYED, "arguments": {"text": "pay invoice 7"}}]},
        {"text": "Paid."}]})
    keys: list[str] = []
    stuck = Gate()
    async with worker(pool, db_url, model=opened(), tool_spec=keyed_send(keys, stuck),
                      shutdown_grace_seconds=0):
        await asyncio.wait_for(stuck.entered.wait(), 30)  # the vendor has the call
    retry_id = retry_of(db_url, run_id)
    async with worker(pool, db_url, model=opened(), tool_spec=keyed_send(keys, opened())):
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (retry_id,), timeout=30)
    # Made again (its result was never recorded), under the key the vendor saw the first time.
    assert len(keys) == 2 and keys[0] == keys[1] == f"{run_id}:call_2_0"
    journal = await events(api, retry_id)
    [continues] = [e for e in journal if e["type"] == "step_start"
                   and e["payload"].get("continues")]
    assert continues["payload"]["continues"] == run_id
    assert [e["payload"]["call_id"] for e in journal if e["type"] == "tool_start"] == ["call_2_0"]


async def test_each_attempt_names_its_new_calls_apart_from_the_attempts_before(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run_id = await queue_run(api, agent_id, {"script": [
        {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
        {"sleep": 30},
        {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 2}}]},
        {"text": "Read both."}]})
    thinking = Gate()
    async with worker(pool, db_url, model=thinking, shutdown_grace_seconds=0):
        await asyncio.wait_for(thinking.entered.wait(), 30)
    retry_id = retry_of(db_url, run_id)
    async with worker(pool, db_url, model=opened()) as model:
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (retry_id,), timeout=30)
    first = [e["payload"]["call_id"] for e in await events(api, run_id)
             if e["type"] == "tool_start"]
    second = [e["payload"]["call_id"] for e in await events(api, retry_id)
              if e["type"] == "tool_start"]
    # The last turn's read is made again under its own name (a read's result is not kept, and
    # reads may repeat); the retry's new call is named with its attempt, apart from them all.
    assert first == ["call_2_0"] and second == ["call_2_0", "call_2_5_0"]
    # The retry's first request holds the first attempt's call and its (read) result.
    assert [role for role, _, _ in model.sent[0]] == ["system", "user", "assistant", "tool"]
