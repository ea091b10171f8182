"""run_python in a run (DESIGN "Code for loops"; RELIABILITY S8): calls from code are ordinary
tool calls (metered by the walls, journaled under the run_python call, approvals as usual), and
the sandbox dies with the run however it ends: finished, cancelled, released, past its
deadline."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import replace

import psycopg
import pytest

from tests.factories import make_agent, make_tenant
from tests.integration.test_python_sandbox import alive, descendants
from tests.integration.workers import WorkerProcess, run_deps, scalar, until
from tickwork.scheduler.runs import cancel_run, start_agent_run
from tickwork.scheduler.tokens import Principal
from tickwork.sql.db import connect
from tickwork.sql.notify import Notifier
from tickwork.worker.claim import claim_queued_runs
from tickwork.worker.run_delivery import DEADLINE_MARGIN_SECONDS, run_claimed
from tickwork.worker.runner import Worker

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is installed by .ci/run")

LOOP = """
done, refused = [], []
for i in range(1, 51):
    try:
        tools.call("demo.get_record", id=i)
        done.append(i)
    except tools.ToolError as exc:
        refused.append(i)
        wall = str(exc)
print("first refused:", refused[0])
(len(done), len(refused), "per-tool limit is 40" in wall)
"""


async def queue_run(db_url: str, script: list, tools: list[str],
                    auto_approve: list[str] | None = None) -> tuple[str, object]:
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        conn.execute("UPDATE agents SET tools = %s, auto_approve = %s",
                     (tools, auto_approve or []))
    async with await connect(db_url, application_name="tickwork-test") as conn:
        notifier = Notifier(conn)
        run = await start_agent_run(conn, Principal(tenant, True), agent,
                                    run_input={"script": script}, timeout_minutes=5,
                                    idempotency_key=None, body_hash="", notifier=notifier)
        await notifier.drain()
    return str(run["id"]), tenant


def python_turn(code: str) -> dict:
    return {"tool_calls": [{"name": "run_python", "arguments": {"code": code}}]}


class RecordingProvider:
    """The scripted provider, keeping what each turn was shown (the tool results)."""

    def __init__(self, inner) -> None:
        self.inner, self.shown = inner, []

    async def complete(self, alias, messages, *args, **kwargs):
        self.shown.append(list(messages))
        return await self.inner.complete(alias, messages, *args, **kwargs)

    def results(self) -> list[dict]:
        """The run_python results the model was shown, in order."""
        seen = {}
        for turn in self.shown:
            for message in turn:
                if message.role == "tool" and message.content.startswith("{"):
                    seen[message.tool_call_id] = json.loads(message.content)
        return list(seen.values())


def events(db_url: str, run_id: str) -> list[tuple[int, str, int | None, dict]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT seq, type, parent_seq, payload FROM run_events"
                            " WHERE execution_id = %s ORDER BY seq", (run_id,)).fetchall()


async def run_to_the_end(pool, db_url: str, run_id: str, **settings) -> RecordingProvider:
    deps = run_deps(pool, **settings)
    provider = RecordingProvider(deps.provider)
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(replace(deps, provider=provider), db_url).run(stop))
    try:
        await until(db_url, "SELECT status IN ('completed', 'failed', 'cancelled')"
                            " FROM executions WHERE id = %s", (run_id,))
    finally:
        stop.set()
        await worker
        await deps.journal_writer.close()
    return provider


async def test_a_50_record_loop_in_one_call_is_metered_by_the_per_tool_wall_and_journaled_under_it(
        pool, db_url):
    run_id, _ = await queue_run(db_url, [python_turn(LOOP), {"text": "Forty records read."}],
                                ["demo.get_record"])
    provider = await run_to_the_end(pool, db_url, run_id)
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) == "completed"
    [result] = provider.results()
    assert result["value"] == [40, 10, True]
    assert result["stdout"] == "first refused: 41\n" and result["tool_calls"] == 50
    journal = events(db_url, run_id)
    [(python_seq, python_call)] = [(seq, p["call_id"]) for seq, kind, _, p in journal
                                   if kind == "tool_start" and p["tool"] == "run_python"]
    starts = [(parent, p) for _, kind, parent, p in journal
              if kind == "tool_start" and p["tool"] == "demo.get_record"]
    assert len(starts) == 40
    assert {parent for parent, _ in starts} == {python_seq}
    assert [p["call_id"] for _, p in starts] == [f"{python_call}_{n}" for n in range(1, 41)]
    assert [p["arguments"] for _, p in starts] == [{"id": n} for n in range(1, 41)]
    refusals = [(parent, p) for _, kind, parent, p in journal if kind == "budget_refusal"]
    assert len(refusals) == 10
    assert {parent for parent, _ in refusals} == {python_seq}
    assert {p["wall"] for _, p in refusals} == {"per_tool"}
    completes = {p["call_id"]: parent for _, kind, parent, p in journal
                 if kind == "tool_complete" and p["tool"] == "demo.get_record"}
    assert len(completes) == 40 and python_call not in completes


async def test_variables_persist_between_two_run_python_calls_of_a_run(pool, db_url):
    script = [python_turn("records = {'a': 1}\nprint('stored')"),
              python_turn("records['b'] = 2\nsorted(records.items())"),
              {"text": "Done."}]
    run_id, _ = await queue_run(db_url, script, [])
    provider = await run_to_the_end(pool, db_url, run_id)
    first, second = provider.results()
    assert (first["stdout"], first["value"]) == ("stored\n", None)
    assert second["value"] == [["a", 1], ["b", 2]]
    assert sandboxes_of(os.getpid()) == set()  # closed when the run ended


async def test_a_call_from_code_that_needs_a_person_is_not_run_and_the_model_is_told(pool, db_url):
    code = ("try:\n    tools.call('demo.send_message', recipient='ops', text='hello')\n"
            "except tools.NeedsApproval as exc:\n    print('not sent')")
    run_id, _ = await queue_run(db_url, [python_turn(code), {"text": "I could not send it."}],
                                ["demo.send_message"])
    provider = await run_to_the_end(pool, db_url, run_id)
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) == "completed"
    [result] = provider.results()
    assert result["stdout"] == "not sent\n"
    assert result["needs_approval_not_run"] == [
        {"tool": "demo.send_message", "arguments": {"recipient": "ops", "text": "hello"}}]
    journal = events(db_url, run_id)
    [python_seq] = [seq for seq, kind, _, p in journal
                    if kind == "tool_start" and p["tool"] == "run_python"]
    [(parent, refusal)] = [(parent, p) for _, kind, parent, p in journal
                           if kind == "budget_refusal"]
    assert (parent, refusal["wall"]) == (python_seq, "needs_approval")
    assert scalar(db_url, "SELECT count(*) FROM approvals") == 0
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0


def sandboxes_of(pid: int) -> set[int]:
    """The bubblewrap processes (and what runs in them) below a process."""
    found = set()
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"bwrap" in cmdline.read() or child in found:
                    found |= {child} | descendants(child)
        except OSError:
            continue
    return found


async def first_sandbox(pid: int, timeout: float = 90) -> set[int]:
    """Wait for a kernel to run below pid (no event tells us; /proc is the truth)."""
    for _ in range(int(timeout / 0.05)):
        tree = sandboxes_of(pid)
        if len(tree) >= 3:  # bwrap, its namespace's init, the kernel
            return tree
        await asyncio.sleep(0.05)
    raise AssertionError(f"no sandbox below {pid} appeared")


SLEEPER = python_turn("import time\nprint('sleeping')\ntime.sleep(600)")


async def test_cancelling_the_run_kills_its_sandbox_and_leaves_no_process(pool, db_url):
    run_id, tenant = await queue_run(db_url, [SLEEPER, {"text": "never"}], [])
    deps = run_deps(pool, python_wall_seconds=600)
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(deps, db_url).run(stop))
    try:
        tree = await first_sandbox(os.getpid())
        async with await connect(db_url, application_name="tickwork-test") as conn:
            await cancel_run(conn, Principal(tenant, True), run_id)
        await until(db_url, "SELECT status = 'cancelled' FROM executions WHERE id = %s",
                    (run_id,))
    finally:
        stop.set()
        await worker
        await deps.journal_writer.close()
    assert not any(alive(pid) for pid in tree)
    assert sandboxes_of(os.getpid()) == set()
    [complete] = [p for _, kind, _, p in events(db_url, run_id)
                  if kind == "tool_complete" and p["tool"] == "run_python"]
    assert complete["ok"] is True  # the call ended (it says why) and the run was cancelled


async def test_a_worker_shutting_down_releases_the_run_and_kills_its_sandbox(db_url):
    run_id, _ = await queue_run(db_url, [SLEEPER, {"text": "never"}], [])
    worker = WorkerProcess(db_url, concurrency=1, TICKWORK_SHUTDOWN_GRACE_SECONDS="1",
                           TICKWORK_PYTHON_WALL_SECONDS="600")
    try:
        tree = await first_sandbox(worker.process.pid)
        assert worker.terminate(timeout=1 + 20) == 0
    finally:
        if worker.process.poll() is None:
            worker.kill()
    assert not any(alive(pid) for pid in tree), worker.log()
    # Released, not left running: another worker continues it.
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) != "running"



async def test_a_large_output_is_offloaded_like_any_result(pool, db_url):
    script = [python_turn("for i in range(400):\n    print('line', i, 'x' * 40)"),
              {"text": "Printed."}]
    run_id, _ = await queue_run(db_url, script, [])
    provider = await run_to_the_end(pool, db_url, run_id)
    [result] = provider.results()
    assert result["offloaded"] is True and result["chars"] > 20_000
    with psycopg.connect(db_url) as conn:
        [stored] = conn.execute("SELECT content FROM tool_results WHERE execution_id = %s",
                                (run_id,)).fetchone()
    assert "line 399" in json.dumps(stored)


async def test_a_run_past_its_deadline_kills_its_sandbox(pool, db_url):
    run_id, _ = await queue_run(db_url, [SLEEPER, {"text": "never"}], [])
    [run] = await claim_queued_runs(pool, limit=1, worker_id="test")
    # Its deadline is a few seconds away: the timer fires while the code sleeps.
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE executions SET deadline = now() + interval '2 seconds'"
                     " WHERE id = %s", (run_id,))
    near = replace(run, waited_seconds=run.timeout_minutes * 60 + DEADLINE_MARGIN_SECONDS - 3)
    deps = run_deps(pool, python_wall_seconds=600)
    delivery = asyncio.create_task(run_claimed(near, deps))
    try:
        tree = await first_sandbox(os.getpid())
        result = await asyncio.wait_for(delivery, 60)
    finally:
        await deps.journal_writer.close()
    assert result == {"status": "failed", "outcome": "timed_out"}
    assert not any(alive(pid) for pid in tree)
    assert sandboxes_of(os.getpid()) == set()


async def test_a_run_released_at_shutdown_kills_its_sandbox_before_the_worker_is_gone(pool,
                                                                                       db_url):
    """In-process: the test's own process lives on, so only the release's close can end it."""
    run_id, _ = await queue_run(db_url, [SLEEPER, {"text": "never"}], [])
    deps = run_deps(pool, python_wall_seconds=600, shutdown_grace_seconds=0.5)
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(deps, db_url).run(stop))
    try:
        tree = await first_sandbox(os.getpid())
        stop.set()
        await asyncio.wait_for(worker, 60)
    finally:
        stop.set()
        await deps.journal_writer.close()
    assert not any(alive(pid) for pid in tree)
    assert sandboxes_of(os.getpid()) == set()
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE retry_of = %s", (run_id,)) == 1
