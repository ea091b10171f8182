"""query_file never stalls the worker's event loop: an oversized SQL is refused before it is
parsed, the query's shape is worked out once and off the loop, and a huge answer is bounded
and offloaded, while another run on the same worker completes (issue 28, attack 1)."""

from __future__ import annotations

import asyncio
import json

import psycopg

from tests.factories import make_agent, make_tenant
from tests.integration.workers import running_worker, until
from tickwork.scheduler.runs import start_agent_run
from tickwork.scheduler.tokens import Principal
from tickwork.sql.db import connect
from tickwork.sql.notify import Notifier

# The attack as sent: a 200 kB IN (…) list, whose shape sqlglot worked out in minutes.
HUGE_IN = ("SELECT * FROM result WHERE id IN ("
           + ",".join(str(i) for i in range(1, 40_000)) + ")")
# A 13.6 MB answer: 200 rows, each a string of 68,000 characters (under every SQLite cap).
LONG_CELL = "replace(printf('%.1000c', 'a'), 'a', printf('%.68c', 'a'))"
HUGE_ANSWER = f"SELECT {LONG_CELL} AS padding FROM result LIMIT 200"
LIST = {"name": "demo.list_records", "arguments": {"limit": 500}}
TRIVIAL = [{"text": "Nothing to do."}]


class LoopProbe:
    """The longest the event loop went without running this probe: a stalled loop shows here
    as one long gap, whatever else was going on."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> LoopProbe:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()


async def queue(db_url: str, tenant, agent, script: list) -> str:
    async with await connect(db_url, application_name="tickwork-test") as conn:
        notifier = Notifier(conn)
        run = await start_agent_run(conn, Principal(tenant, True), agent,
                                    run_input={"script": script}, timeout_minutes=5,
                                    idempotency_key=None, body_hash="", notifier=notifier)
        await notifier.drain()
    return str(run["id"])


async def two_runs(db_url: str, script: list) -> tuple[str, str]:
    """The attacking run (script) and a trivial run of another agent, queued together."""
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        attacker, bystander = make_agent(conn, tenant, "attacker"), make_agent(conn, tenant)
        tools = ["demo.list_records", "query_file"]
        conn.execute("UPDATE agents SET tools = %s, auto_approve = %s WHERE id = %s",
                     (tools, tools, attacker))
    return (await queue(db_url, tenant, attacker, script),
            await queue(db_url, tenant, bystander, TRIVIAL))


def events(db_url: str, run_id: str, kind: str) -> list[dict]:
    with psycopg.connect(db_url) as conn:
        return [row[0] for row in conn.execute(
            "SELECT payload FROM run_events WHERE execution_id = %s AND type = %s ORDER BY seq",
            (run_id, kind))]


def status(db_url: str, run_id: str) -> str:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT status FROM executions WHERE id = %s",
                            (run_id,)).fetchone()[0]


async def finished(db_url: str, *runs: str) -> None:
    for run in runs:
        await until(db_url, "SELECT status IN ('completed', 'failed') FROM executions"
                            " WHERE id = %s", (run,), timeout=300)


async def test_a_200_kb_query_is_refused_unparsed_while_another_run_completes(pool, db_url):
    call = {"name": "query_file", "arguments": {"file_ref": "$last_file_ref", "sql": HUGE_IN}}
    attack, bystander = await two_runs(db_url, [
        {"tool_calls": [LIST]}, {"tool_calls": [call, call]}, {"text": "Refused."}])
    with LoopProbe() as probe:
        async with running_worker(pool, db_url, concurrency=2):
            await finished(db_url, attack, bystander)
    assert status(db_url, bystander) == "completed" and status(db_url, attack) == "completed"
    refusals = [e for e in events(db_url, attack, "budget_refusal") if e["tool"] == "query_file"]
    assert [e["wall"] for e in refusals] == ["sql_length", "sql_length"]
    assert refusals[0]["message"].startswith("This query did NOT execute: its SQL is 228,")
    assert "at most 100,000 characters" in refusals[0]["message"]
    # Nothing ran: no query process, no tool_start for the refused calls.
    assert [e["tool"] for e in events(db_url, attack, "tool_start")] == ["demo.list_records"]
    # Unbounded, each call's shape took sqlglot minutes on this loop; nothing may stall it now.
    assert probe.longest < 5, probe.longest


async def test_a_13_mb_answer_is_bounded_and_offloaded_while_another_run_completes(pool, db_url):
    call = {"name": "query_file", "arguments": {"file_ref": "$last_file_ref",
                                                "sql": HUGE_ANSWER}}
    attack, bystander = await two_runs(db_url, [
        {"tool_calls": [LIST]}, {"tool_calls": [call]}, {"text": "Bounded."}])
    with LoopProbe() as probe:
        async with running_worker(pool, db_url, concurrency=2):
            await finished(db_url, attack, bystander)
    assert status(db_url, bystander) == "completed" and status(db_url, attack) == "completed"
    [_, answered] = events(db_url, attack, "tool_complete")
    assert answered["tool"] == "query_file" and answered["ok"] is True
    with psycopg.connect(db_url) as conn:
        [(chars, content)] = conn.execute(
            "SELECT chars, content FROM tool_results WHERE execution_id = %s AND tool ="
            " 'query_file'", (attack,)).fetchall()
    answer = json.loads(content) if isinstance(content, str) else content
    assert chars <= 1_100_000  # the answer's 1 MB bound, plus its JSON framing
    assert answer["truncated"] is True and 0 < answer["row_count"] < 200
    assert "1,000,000 bytes" in answer["note"]
    assert probe.longest < 5, probe.longest
