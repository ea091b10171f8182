"""query_file in a box: each query is a child process with CPU and memory limits, killed at its
time limit or when its caller is cancelled; a worker always exits within its grace period."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from tickwork.scheduler.runs import start_agent_run
from tickwork.sql.notify import Notifier
from tickwork.scheduler.tokens import Principal
from tickwork.sql.db import connect
from tickwork.sql.ids import new_id
from tests.factories import make_agent, make_tenant
from tests.integration.workers import WorkerProcess, run_deps, scalar, until
from tickwork.worker.runner import Worker
from tickwork.worker.tools.local import ToolInputError, query_file
from tickwork.worker.tools.offload import maybe_offload, render_result
from tickwork.worker.tools import sandbox
from tickwork.worker.tools.sandbox import CHILD, QueryLimits, run_query
from tickwork.worker.tools.sqlbox import QueryError

RECORDS = [{"id": i, "title": f"Record {i}", "category": ["invoice", "ticket"][i % 2]}
           for i in range(1, 501)]
# The issue's attack, as sent: a 40-million-character haystack and a 40,000-character needle.
ISSUE_ATTACK = "SELECT instr(printf('%.*c', 40000000, 'a'), printf('%.*c', 40000, 'a'))"
# The closest shape that gets past the printf and length caps: one instr() call over a string
# of exactly the 1 MB cap with a 400,000-character needle that almost matches everywhere (about
# 10^11 byte comparisons inside one SQLite function call, which no progress handler sees).
MILLION = "replace(printf('%.1000c', 'a'), 'a', printf('%.1000c', 'a'))"
ATTACK = f"SELECT instr({MILLION}, substr({MILLION}, 1, 400000) || 'b') AS hit"


def query_children(parent: int) -> list[int]:
    """Live query processes (worker/tools/sqlbox.py) whose parent is the given pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and b"worker.tools.sqlbox" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def first_query_child(parent: int, timeout: float = 60) -> int:
    """Wait for the query process to start (no event tells us; /proc is the truth)."""
    for _ in range(int(timeout / 0.05)):
        if children := query_children(parent):
            return children[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no query process of {parent} appeared")


async def stored(conn, run) -> str:
    reply = json.loads(await maybe_offload(conn, execution_id=run, tool="demo.list_records",
                                           value=RECORDS))
    return reply["file_ref"]


async def test_the_issues_attack_is_refused_before_it_builds_its_strings(pool):
    run = new_id()
    async with pool.connection() as conn:
        file_ref = await stored(conn, run)
        with pytest.raises(ToolInputError, match="limited to 1000 here, got 40000000"):
            await query_file(conn, run, file_ref, ISSUE_ATTACK)
        with pytest.raises(ToolInputError, match=r"fts3_tokenizer\(\) is not allowed"):
            await query_file(conn, run, file_ref, "SELECT hex(fts3_tokenizer('simple'))")
        answer = await query_file(conn, run, file_ref,
                                  "SELECT category, count(*) FROM result GROUP BY 1 ORDER BY 1")
        assert answer["rows"] == [["invoice", 250], ["ticket", 250]]


async def test_one_runaway_function_call_is_killed_at_the_time_limit_and_the_loop_stays_free(pool):
    run = new_id()
    async with pool.connection() as conn:
        file_ref = await stored(conn, run)
        query = asyncio.create_task(query_file(conn, run, file_ref, ATTACK,
                                               limits=QueryLimits(time_limit_s=1)))
        child = await first_query_child(os.getpid())
        round_trips = 0
        while not query.done():  # other work on this event loop goes on meanwhile
            async with pool.connection() as other:
                assert (await (await other.execute("SELECT 1")).fetchone()) is not None
            round_trips += 1
            await asyncio.sleep(0.02)
        with pytest.raises(ToolInputError, match=r"longer than 1 s and was stopped \(its process "
                                                 r"was killed\)"):
            await query
    assert round_trips >= 3
    assert not alive(child) and query_children(os.getpid()) == []


async def test_a_cancelled_call_kills_its_query_process(pool):
    run = new_id()
    async with pool.connection() as conn:
        file_ref = await stored(conn, run)
        query = asyncio.create_task(query_file(conn, run, file_ref, ATTACK,
                                               limits=QueryLimits(time_limit_s=600)))
        child = await first_query_child(os.getpid())
        assert alive(child)
        query.cancel()
        with pytest.raises(asyncio.CancelledError):
            await query
    assert not alive(child)


async def test_a_call_cancelled_just_as_its_child_is_ready_is_cancelled(monkeypatch):
    # The race CI met: the cancel arrives as loading finishes. Python 3.11's wait_for then
    # returned the load's result and the cancel was lost: the query ran on and answered.
    call = None
    loaded = sandbox._load

    async def load_then_cancel(child, request):
        first = await loaded(child, request)
        call.cancel()  # the caller's cancel, in the same step as the load's answer
        return first

    monkeypatch.setattr(sandbox, "_load", load_then_cancel)
    call = asyncio.create_task(run_query(render_result(RECORDS), "SELECT count(*) FROM result"))
    with pytest.raises(asyncio.CancelledError):
        await call
    assert query_children(os.getpid()) == []


async def test_a_query_past_its_memory_limit_is_stopped_and_says_so():
    distinct_pads = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                     "WHERE x < 2000000) SELECT count(DISTINCT x || printf('%.900c', 'a')) FROM c")
    with pytest.raises(QueryError, match="needed more than 64 MB of memory") as stopped:
        await run_query(render_result(RECORDS), distinct_pads,
                        QueryLimits(memory_mb=64, time_limit_s=60))
    assert stopped.value.stopped == "memory"
    big = render_result([{"id": i, "text": "x" * 1000} for i in range(60_000)])  # 60 MB
    with pytest.raises(QueryError, match="needed more than 64 MB of memory") as stopped:
        await run_query(big, "SELECT count(*) FROM result", QueryLimits(memory_mb=64))
    assert stopped.value.stopped == "memory"


def test_a_query_process_nobody_kills_stops_itself_at_its_cpu_limit():
    header = {"sql": ATTACK, "max_rows": 10, "time_limit_s": 600, "length_limit": 1_000_000,
              "heap_limit": 0}
    child = subprocess.run([sys.executable, *CHILD, "1", str(512 * 2**20)],
                           input=json.dumps(header).encode() + b"\n[1]", capture_output=True,
                           timeout=120)
    assert child.returncode == -signal.SIGXCPU
    assert child.stdout == b"ready\n"  # loaded, then stopped mid-query by the kernel


# --- through a worker ------------------------------------------------------------------------

async def queue_run(db_url: str, script: list) -> str:
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        tools = ["demo.list_records", "query_file"]
        conn.execute("UPDATE agents SET tools = %s, auto_approve = %s", (tools, tools))
    async with await connect(db_url, application_name="tickwork-test") as conn:
        notifier = Notifier(conn)
        run = await start_agent_run(conn, Principal(tenant, True), agent,
                                    run_input={"script": script}, timeout_minutes=5,
                                    idempotency_key=None, body_hash="", notifier=notifier)
        await notifier.drain()
    return str(run["id"])


class RecordingProvider:
    """The scripted provider, keeping what each turn was shown (the tool results)."""

    def __init__(self, inner) -> None:
        self.inner, self.shown = inner, []

    async def complete(self, alias, messages, *args, **kwargs):
        self.shown.append(list(messages))
        return await self.inner.complete(alias, messages, *args, **kwargs)


RUNAWAY_SCRIPT = [{"tool_calls": [{"name": "demo.list_records", "arguments": {"limit": 500}}]},
                  {"tool_calls": [{"name": "query_file", "arguments": {
                      "file_ref": "$last_file_ref", "sql": ATTACK}}]},
                  {"text": "The query was stopped."}]


async def test_a_runaway_query_in_a_run_is_a_failed_call_that_says_it_was_stopped(pool, db_url):
    run_id = await queue_run(db_url, RUNAWAY_SCRIPT)
    deps = run_deps(pool, query_file_time_limit_seconds=1)
    provider = RecordingProvider(deps.provider)
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(replace(deps, provider=provider), db_url).run(stop))
    await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s", (run_id,))
    stop.set()
    await worker
    await deps.journal_writer.close()
    with psycopg.connect(db_url) as conn:
        [payload] = [row[0] for row in conn.execute(
            "SELECT payload FROM run_events WHERE execution_id = %s AND type = 'tool_complete'"
            " AND payload->>'tool' = 'query_file'", (run_id,))]
    assert payload["ok"] is False
    # What the model (or, once older results are masked, its judge) was shown for the call.
    shown = "\n".join(m.content for turn in provider.shown for m in turn)
    assert ('{"error": "the query ran longer than 1 s and was stopped (its process was killed); '
            'filter, aggregate or add a LIMIT, and avoid functions over very long strings"}'
            ) in shown
    assert query_children(os.getpid()) == []


async def test_a_worker_in_a_runaway_query_exits_within_its_grace_period_leaving_no_child(db_url):
    """The query may run for 600 s; SIGTERM with a 1 s grace must still end the worker (and
    its query process) at once. Whatever becomes of the run is the release's business."""
    run_id = await queue_run(db_url, RUNAWAY_SCRIPT)
    worker = WorkerProcess(db_url, concurrency=1, TICKWORK_SHUTDOWN_GRACE_SECONDS="1",
                           TICKWORK_QUERY_FILE_TIME_LIMIT_SECONDS="600")
    try:
        child = await first_query_child(worker.process.pid, timeout=90)  # inside query_file
        assert alive(child)
        # Grace plus a wide margin for a loaded machine; the query alone would run for minutes.
        assert worker.terminate(timeout=1 + 20) == 0
    finally:
        if worker.process.poll() is None:
            worker.kill()
    assert not alive(child)
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE execution_id = %s"
                          " AND type = 'tool_complete' AND payload->>'tool' = 'query_file'"
                          " AND (payload->>'ok')::boolean", (run_id,)) == 0
