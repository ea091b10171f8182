"""An agent's own settings (DESIGN.md third round): model, timeout_minutes, max_tool_calls,
token_budget and max_concurrent_runs, in its body (and so in its YAML), each over the
deployment's default; the hard stop names the setting that stopped the run."""

from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager

from tests.factories import queue_run, scripted_agent
from tests.integration.test_cli import up  # noqa: F401 (the fixture: `tickwork up` running)
from tests.integration.test_worker_runs import events, finished
from tests.integration.workers import running_worker, scalar, serving, until
from tickwork.worker.providers.routing import Router
from tickwork.worker.providers.scripted import ScriptedProvider
from tickwork.worker.settings import WorkerSettings
from tickwork.worker_process import worker_deps

FOUR_CALLS = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": n}}]}
              for n in range(1, 5)] + [{"text": "Done."}]


async def run_of(api, pool, db_url, script: list, *, worker_settings: dict | None = None,
                 **agent_fields) -> tuple[dict, list[dict]]:
    agent_id = await scripted_agent(api, **agent_fields)
    run_id = await queue_run(api, agent_id, {"script": script})
    async with running_worker(pool, db_url, **(worker_settings or {})):
        await until(db_url, *finished(run_id))
    return (await api.get(f"/v1/runs/{run_id}")).json(), await events(api, run_id)


def stop_text(journal: list[dict]) -> str:
    return next(e["payload"]["text"] for e in journal
                if e["type"] == "content_delta" and e["payload"].get("injected"))


async def test_an_agents_max_tool_calls_stops_its_run_and_the_stop_names_it(api, pool, db_url):
    run, journal = await run_of(api, pool, db_url, FOUR_CALLS, max_tool_calls=2)
    assert (run["status"], run["outcome"]) == ("completed", "hard_stop")
    assert "the agent's max_tool_calls" in run["reason"]
    text = stop_text(journal)
    assert "hard limit of 2 tool calls" in text and "raise the agent's max_tool_calls" in text
    assert sum(e["type"] == "tool_start" for e in journal) == 2


async def test_the_deployments_hard_cap_is_named_when_it_stopped_the_run(api, pool, db_url):
    run, journal = await run_of(api, pool, db_url, FOUR_CALLS, worker_settings={"hard_cap": 3})
    assert run["outcome"] == "hard_stop"
    assert "TICKWORK_HARD_CAP" in run["reason"]
    assert "raise the deployment's TICKWORK_HARD_CAP" in stop_text(journal)


async def test_an_agents_max_tool_calls_overrides_the_deployments_hard_cap(api, pool, db_url):
    run, _ = await run_of(api, pool, db_url, FOUR_CALLS, worker_settings={"hard_cap": 2},
                          max_tool_calls=10)
    assert (run["status"], run["outcome"]) == ("completed", "done")


async def test_an_agents_token_budget_stops_its_run_and_the_stop_names_it(api, pool, db_url):
    costly = {"input_tokens": 80, "output_tokens": 30}
    script = [{**turn, "usage": costly} for turn in FOUR_CALLS]
    run, journal = await run_of(api, pool, db_url, script, token_budget=100,
                                worker_settings={"token_budget": 100_000})
    assert run["outcome"] == "hard_stop"
    assert "token budget of 100 tokens" in run["reason"]
    assert "the agent's token_budget" in run["reason"]
    assert "the agent's token_budget" in stop_text(journal)


async def test_an_agents_timeout_minutes_is_the_deadline_its_claim_gives(api, pool, db_url):
    script = [{"text": "Done."}]
    run, _ = await run_of(api, pool, db_url, script, timeout_minutes=2)
    assert run["timeout_minutes"] == 2  # the request said nothing: 5 by default
    minutes = scalar(db_url, "SELECT extract(epoch FROM deadline - started_at) / 60"
                             " FROM executions WHERE id = %s", (run["id"],))
    assert float(minutes) == 2


class Recording(ScriptedProvider):
    """The scripted model, noting the alias of every call it gets."""

    def __init__(self) -> None:
        super().__init__(sleep=asyncio.sleep)
        self.aliases: list[str] = []

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        self.aliases.append(alias)
        return await super().complete(alias, messages, tools, run, on_text=on_text)


@asynccontextmanager
async def routed_worker(pool, db_url: str, router: Router):
    deps = worker_deps(pool, WorkerSettings(poll_interval_seconds=0.2), provider=router,
                       worker=f"test:{os.getpid()}")
    async with serving(deps, db_url):
        yield


async def test_an_agents_model_alias_reaches_the_provider_configured_for_it(api, pool, db_url):
    default, cheap = Recording(), Recording()
    router = Router({"default": default, "judge": default, "cheap": cheap})
    mine = await scripted_agent(api, name="cheap-agent", model="cheap")
    theirs = await scripted_agent(api, name="plain-agent")
    runs = [await queue_run(api, agent, {"script": [{"text": "Done."}]})
            for agent in (mine, theirs)]
    async with routed_worker(pool, db_url, router):
        for run_id in runs:
            await until(db_url, *finished(run_id))
    assert cheap.aliases == ["cheap"]  # the agent's turn; the judge stays on its own alias
    assert "default" in default.aliases and "cheap" not in default.aliases


async def test_a_model_alias_the_worker_does_not_route_fails_the_run_saying_so(api, pool, db_url):
    router = Router({"default": Recording(), "judge": Recording()})
    agent = await scripted_agent(api, model="missing")
    run_id = await queue_run(api, agent, {"script": [{"text": "Done."}]})
    async with routed_worker(pool, db_url, router):
        await until(db_url, *finished(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert run["status"] == "failed"
    assert "'missing' is not an alias this worker routes" in run["reason"]
    assert "default, judge" in run["reason"]


async def test_the_settings_are_stored_shown_and_cleared_by_a_put(api):
    fields = {"model": "default", "timeout_minutes": 10, "max_tool_calls": 50,
              "token_budget": 20000, "max_concurrent_runs": 3}
    created = (await api.post("/v1/agents", json={"name": "tuned", **fields})).json()
    assert {k: created[k] for k in fields} == fields
    shown = (await api.get(f"/v1/agents/{created['id']}")).json()
    assert {k: shown[k] for k in fields} == fields
    put = await api.put(f"/v1/agents/{created['id']}", json={"name": "tuned"})
    assert put.status_code == 200
    assert all(put.json()[k] is None for k in fields)  # back to the deployment's defaults


async def test_bad_settings_are_refused_with_the_field_named_and_nothing_stored(api):
    for field, value in [("max_tool_calls", -1), ("token_budget", 0), ("timeout_minutes", 99),
                         ("max_concurrent_runs", -5), ("model", "no spaces please"),
                         ("max_tool_calls", "10")]:
        response = await api.post("/v1/agents", json={"name": "bad", field: value})
        assert response.status_code == 422, (field, response.text)
        assert field in response.text, response.text
    assert (await api.get("/v1/agents")).json()["items"] == []


async def test_an_unknown_model_alias_is_refused_when_the_api_knows_the_aliases(api):
    settings = api.app.state.settings
    api.app.state.settings = settings.model_copy(update={"models": "default=scripted,cheap=scripted"})
    try:
        refused = await api.post("/v1/agents", json={"name": "a", "model": "gpt-9"})
        accepted = await api.post("/v1/agents", json={"name": "b", "model": "cheap"})
    finally:
        api.app.state.settings = settings
    assert refused.status_code == 400  # as an unknown tool key is
    body = refused.json()
    assert (body["error"], body["field"]) == ("unknown_model", "model"), body
    assert "gpt-9" in body["message"] and "cheap, default" in body["message"]
    assert accepted.status_code == 201


def test_the_settings_come_from_the_agents_yaml_and_agent_list_shows_them(up, tmp_path):
    agent_file = tmp_path / "tuned.yaml"
    agent_file.write_text("name: tuned\ntools: [demo.get_record]\nmodel: default\n"
                          "timeout_minutes: 10\nmax_tool_calls: 40\ntoken_budget: 20000\n"
                          "max_concurrent_runs: 2\n")
    assert "created agent tuned" in up.cli("agent", "apply", str(agent_file)).stdout
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: plain\n")
    up.cli("agent", "apply", str(plain))
    listed = up.cli("agent", "list").stdout
    assert ("model default, 10 min timeout, 40 tool calls, 20,000 tokens, 2 at once"
            in listed), listed
    assert "defaults" in listed
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: tuned\nmax_tool_calls: -3\n")
    refused = up.cli("agent", "apply", str(bad), check=False)
    assert refused.returncode == 1 and "max_tool_calls" in refused.stderr, refused.stderr
    assert "40 tool calls" in up.cli("agent", "list").stdout  # nothing changed
