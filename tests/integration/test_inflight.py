"""Runs in flight hold no connection while their model or a tool works: a worker with a pool of
two connections holds many more runs than two inside a tool, or waiting on the model, at once."""

from __future__ import annotations

import asyncio

import psycopg

from tickwork.sql.db import open_pool
from tests.factories import make_agent, make_tenant
from tests.integration.workers import run_deps, scalar, until
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.runner import Worker
from tickwork.worker.tools.registry import ToolSpec, arguments_model

RUNS = 12
WAIT_TOOL = "test.wait_for_all"


class Meeting:
    """Each caller waits until ``expected`` callers are waiting at once, then all go on.
    If any caller held a pooled connection while waiting, no more than the pool's size
    could ever be here together, and the meeting would never happen."""

    def __init__(self, expected: int) -> None:
        self.expected, self.present, self.peak = expected, 0, 0
        self.everyone = asyncio.Event()

    async def wait(self, *_ignored) -> None:
        self.present += 1
        self.peak = max(self.peak, self.present)
        if self.present == self.expected:
            self.everyone.set()
        await self.everyone.wait()
        self.present -= 1


def waiting_tool(meeting: Meeting) -> ToolSpec:
    async def wait_for_all(context, label: str = "") -> dict:
        await meeting.wait()
        return {"met": meeting.expected, "label": label}
    return ToolSpec(key=WAIT_TOOL, tool_class="read", is_local=False,
                    description="Waits until every run is inside it.",
                    parameters={"type": "object", "properties": {"label": {"type": "string"}}},
                    function=wait_for_all, arguments=arguments_model(wait_for_all))


def queue_runs(db_url: str, script: list, count: int) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        conn.execute("UPDATE agents SET tools = %s WHERE id = %s", ([WAIT_TOOL], agent))
        conn.execute(
            "WITH e AS (INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
            " trigger_source, scheduled_for, max_attempts, timeout_minutes, input)"
            " SELECT gen_random_uuid(), %s, %s, 'run', 'api', now(), 1, 5, %s::jsonb"
            " FROM generate_series(1, %s) RETURNING id)"
            " INSERT INTO queue_tasks (name, kind, execution_id) SELECT id::text, 'run', id FROM e",
            (tenant, agent, psycopg.types.json.Jsonb({"script": script}), count))


async def run_all_with_two_connections(db_url: str, script: list, meeting: Meeting) -> None:
    pool = await open_pool(db_url, application_name="tickwork-test-inflight", min_size=1,
                           max_size=2)
    deps = run_deps(pool, concurrency=RUNS)
    deps.catalog[WAIT_TOOL] = waiting_tool(meeting)
    deps.provider = build_router(ProviderSettings(models=""), sleep=meeting.wait)
    stop = asyncio.Event()
    worker = Worker(deps, db_url)
    task = asyncio.create_task(worker.run(stop))
    try:
        await until(db_url, "SELECT count(*) = %s FROM executions WHERE status = 'completed'"
                            " AND outcome = 'done'", (RUNS,))
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await deps.journal_writer.close()
        await pool.close()


async def test_runs_inside_a_vendor_tool_hold_no_connection(db_url):
    script = [{"tool_calls": [{"name": WAIT_TOOL, "arguments": {"label": "x"}}]},
              {"text": "Met."}]
    queue_runs(db_url, script, RUNS)
    meeting = Meeting(RUNS)
    await run_all_with_two_connections(db_url, script, meeting)
    assert meeting.peak == RUNS  # all twelve were inside the tool together, on two connections
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'tool_complete'"
                          " AND (payload->>'ok')::boolean") == RUNS


async def test_runs_waiting_on_their_model_hold_no_connection(db_url):
    script = [{"sleep": 1}, {"text": "Waited."}]  # the sleep waits on the meeting instead
    queue_runs(db_url, script, RUNS)
    meeting = Meeting(RUNS)
    await run_all_with_two_connections(db_url, script, meeting)
    assert meeting.peak == RUNS
