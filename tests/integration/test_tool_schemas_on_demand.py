"""Names first, schemas when needed, through the hostile OpenAI-compatible server over real HTTP:
a 40-tool agent's first call carries only the local tools' schemas and names the 40 in the
system prompt; load_tools binds the one it needs, whose schema every later call carries; over
a 10-turn run the requests are much smaller than with every schema on every call (the figure is
printed for the README)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import psycopg
import pytest

from tests.factories import create_agent, queue_run
from tests.hostile_model import HostileModel, call, reply
from tests.integration.workers import hostile_deps, serving, until
from tickwork.worker.tools.registry import ToolSpec, arguments_model

TOOLS = 40


def acme_tool(n: int) -> ToolSpec:
    async def look(context, customer_id: int, include_history: bool = False,
                   fields: list[str] | None = None) -> dict:
        return {"tool": n, "customer_id": customer_id}
    return ToolSpec(key=f"acme.lookup_{n:02d}", tool_class="read", is_local=False,
                    description=(f"Look up customer data set {n}: accounts, invoices and "
                                 "contacts, with optional history and a choice of fields."),
                    parameters=arguments_model(look).model_json_schema(), function=look,
                    arguments=arguments_model(look))


@pytest.fixture
def model():
    with HostileModel() as hostile:
        yield hostile


@asynccontextmanager
async def acme_worker(pool, db_url, model: HostileModel, on_demand: bool):
    deps, provider = hostile_deps(pool, model.base_url, "default=openai:hostile-agent,"
                                  "judge=scripted", timeout=60, worker="schemas-test",
                                  tool_schemas_on_demand=on_demand)
    for n in range(TOOLS):
        deps.catalog[acme_tool(n).key] = acme_tool(n)
    async with serving(deps, db_url, provider=provider):
        yield


async def ten_turns(api, pool, db_url, model: HostileModel, on_demand: bool) -> list[dict]:
    agent = await create_agent(api, f"acme-{on_demand}", tools=["demo.get_record"])
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE agents SET tools = %s WHERE id = %s",
                     ([acme_tool(n).key for n in range(TOOLS)], agent["id"]))
    model.queue(reply(None, call("load_tools", {"names": ["acme__lookup_03"]})),
                *[reply(None, call("acme.lookup_03", {"customer_id": turn}))
                  for turn in range(8)],
                reply("Customer 7 has no open invoices."))
    run_id = await queue_run(api, agent["id"], {"prompt": "Check customer 7's invoices."})
    async with acme_worker(pool, db_url, model, on_demand):
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (run_id,), timeout=60)
    return [r.body for r in model.accepted()]


def sizes(bodies: list[dict]) -> tuple[int, int]:
    """(characters of tool schemas, characters of whole requests) over the run."""
    return (sum(len(json.dumps(b.get("tools", []))) for b in bodies),
            sum(len(json.dumps(b)) for b in bodies))


async def test_a_forty_tool_agent_loads_the_one_it_needs_and_sends_far_less(api, pool, db_url,
                                                                          model):
    bodies = await ten_turns(api, pool, db_url, model, on_demand=True)
    assert len(bodies) == 10 and not model.refused_histories()
    first, later = bodies[0], bodies[1]
    local = {"update_plan", "task_complete", "read_file", "query_file", "load_tools",
             "run_python"}
    assert {t["function"]["name"] for t in first["tools"]} == local
    system = first["messages"][0]["content"]
    assert system.count("\n- acme__lookup_") == TOOLS and "load_tools" in system
    assert {t["function"]["name"] for t in later["tools"]} == local | {"acme__lookup_03"}
    assert "acme__lookup_03" not in later["messages"][0]["content"]  # loaded: not listed
    loaded = json.loads(later["messages"][-1]["content"])
    assert loaded["loaded"][0]["parameters"]["required"] == ["customer_id"]
    on_demand = sizes(bodies)

    every = HostileModel().start()
    try:
        all_bodies = await ten_turns(api, pool, db_url, every, on_demand=False)
    finally:
        every.close()
    assert len(all_bodies[0]["tools"]) == TOOLS + len(local)
    all_schemas = sizes(all_bodies)
    print(f"\nten turns, {TOOLS} tools: schemas {on_demand[0]:,} vs {all_schemas[0]:,} chars; "
          f"requests {on_demand[1]:,} vs {all_schemas[1]:,} chars "
          f"(~{(all_schemas[1] - on_demand[1]) // 4:,} input tokens saved at 4 chars a token)")
    assert on_demand[1] < all_schemas[1] / 2
