"""The openai provider against a real OpenAI-compatible server (llama.cpp + SmolLM2-135M).

Deselected by default; run with `pytest -m realmodel` after `scripts/realmodel-setup`. The
model is tiny: the assertions are on shapes (a tool call parsed and executed, its result sent
back, the run ended and journaled), never on its wisdom.
"""

import pytest

from tests.integration.test_worker_runs import events, make_agent, start_run
from tests.integration.workers import until
from tests.realmodel_server import realmodel_available, running_server
from worker.handler import RunDeps
from worker.providers.routing import ProviderSettings, build_router
from worker.runner import Worker
from worker.settings import WorkerSettings
from worker.tools.registry import catalog

pytestmark = pytest.mark.realmodel


async def test_a_real_model_calls_a_tool_gets_its_result_and_the_run_ends(api, pool, db_url):
    import asyncio

    assert realmodel_available(), "run scripts/realmodel-setup first (it builds the server venv)"
    with running_server() as base_url:
        provider = build_router(ProviderSettings(models="default=openai:smollm2,judge=scripted",
                                                 openai_base_url=base_url))
        specs = catalog()
        deps = RunDeps(pool=pool, provider=provider, catalog={s.key: s for s in specs},
                       settings=WorkerSettings(poll_interval_seconds=0.2, max_model_turns=3),
                       worker_id="realmodel-test")
        agent_id = await make_agent(api, tools=["demo.get_record"], name="real")
        run_id = await start_run(api, agent_id, {"prompt": "Fetch record 7 with demo__get_record."})
        stop = asyncio.Event()
        task = asyncio.create_task(Worker(deps, db_url).run(stop))
        try:
            await until(db_url, "SELECT status <> 'queued' AND status <> 'running'"
                                " FROM executions WHERE id = %s", (run_id,), timeout=300)
        finally:
            stop.set()
            await task
            await provider.aclose()
    journal = await events(api, run_id)
    calls = [e["payload"] for e in journal if e["type"] == "tool_start"]
    completes = [e["payload"] for e in journal if e["type"] == "tool_complete"]
    assert calls and calls[0]["tool"] == "demo.get_record"
    assert isinstance(calls[0]["arguments"].get("id"), int)
    assert completes and completes[0]["ok"] is True
    assert journal[-1]["type"] == "run_complete"
    assert journal[-1]["payload"]["status"] == "completed"
