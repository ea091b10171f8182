"""The openai provider against a real OpenAI-compatible server: llama.cpp's llama-server (run
with --jinja) and SmolLM2-135M, for the agent and for the judge.

Deselected by default; run with `pytest -m realmodel` after `scripts/realmodel-setup` (.ci/run
does both). The model is tiny and its wisdom is not under test: the assertions are what any
real model must get from the harness. The run ends with a recorded outcome (never a crash or a
transport failure); every request sent was a well-formed Chat Completions history (each tool
call answered exactly once, right after the call, under the harness's own id); every answer
was streamed; each tool call the model made went through the walls into the journal; each model
call's usage is journaled and the run's usage is their sum.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.factories import queue_run
from tests.integration.test_worker_runs import events
from tests.integration.workers import until
from tests.realmodel_server import realmodel_available, running_server
from tickwork.worker_process import worker_deps
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.runner import Worker
from tickwork.worker.settings import WorkerSettings

# A run of a few model turns on 2 shared cores can take minutes (the suite's default is 300 s).
pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(900)]

AGENT_MODEL, JUDGE_MODEL = "smollm2-agent", "smollm2-judge"
ROLES = {"system", "user", "assistant", "tool"}
ENDED_HONESTLY = {"done", "question", "stalled_out", "hard_stop"}
# The server's seed is fixed, so the tiny model answers the same way each time; with these words
# it answers in prose (it has not called the tool once here). The tool-call assertions below hold
# whenever a model does call one; the exactly-once tool path over real HTTP is the hostile
# server's test (test_hostile_model.py).
INSTRUCTIONS = "You are an agent. Answer only with a <tool_call> when a tool can help."
PROMPT = "Call the demo__get_record function with id 7, then say what the record is."


class Recorder:
    """What went over the wire: each request body, and whether each answer was an event stream."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.streamed: list[bool] = []

    async def on_request(self, request: httpx.Request) -> None:
        self.requests.append(json.loads(request.content))

    async def on_response(self, response: httpx.Response) -> None:
        if response.is_success:
            self.streamed.append(
                response.headers.get("content-type", "").startswith("text/event-stream"))


def history_problems(messages: list[dict]) -> list[str]:
    """What a strict Chat Completions server would refuse in this history (empty: none)."""
    problems, seen_ids, open_ids = [], set(), []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            problems.append(f"#{i}: unknown role {role!r}")
        if role != "tool" and open_ids:
            problems.append(f"#{i}: {role} before the calls {open_ids} were answered")
            open_ids = []
        content = message.get("content")
        if not isinstance(content, str) and not (content is None and message.get("tool_calls")):
            problems.append(f"#{i}: content {content!r} is neither text nor null beside calls")
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                call_id = call.get("id")
                if not call_id or call_id in seen_ids:
                    problems.append(f"#{i}: tool call id {call_id!r} missing or used before")
                seen_ids.add(call_id)
                open_ids.append(call_id)
                if not isinstance(json.loads(call["function"]["arguments"]), dict):
                    problems.append(f"#{i}: arguments of {call_id} are not a JSON object")
        elif role == "tool":
            if message.get("tool_call_id") not in open_ids:
                problems.append(f"#{i}: tool result for {message.get('tool_call_id')!r}, which "
                                f"is not an unanswered call of the previous assistant message")
            else:
                open_ids.remove(message["tool_call_id"])
    if open_ids:
        problems.append(f"the calls {open_ids} are never answered")
    return problems


def called_ids(messages: list[dict]) -> list[str]:
    return [call["id"] for m in messages if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []]


async def test_a_run_on_a_real_model_with_a_real_judge_ends_honestly_over_a_well_formed_stream(
        api, pool, db_url):
    assert realmodel_available() is None, realmodel_available()
    recorder = Recorder()
    http = httpx.AsyncClient(event_hooks={"request": [recorder.on_request],
                                          "response": [recorder.on_response]})
    with running_server() as base_url:
        provider = build_router(ProviderSettings(
            models=f"default=openai:{AGENT_MODEL},judge=openai:{JUDGE_MODEL}",
            openai_base_url=base_url, openai_timeout_seconds=120), http=http)
        # Small budgets keep the run short on 2 cores: a model that never stops is ended by
        # the turn cap (hard_stop) and one the judge keeps calling stalled runs out of units.
        deps = worker_deps(pool, WorkerSettings(poll_interval_seconds=0.2, max_model_turns=6,
                                                continuation_units=2),
                           provider=provider, worker="realmodel-test")
        created = await api.post("/v1/agents", json={"name": "real", "tools": ["demo.get_record"],
                                                     "instructions": INSTRUCTIONS})
        assert created.status_code == 201, created.text
        agent_id = created.json()["id"]
        run_id = await queue_run(api, agent_id, {"prompt": PROMPT})
        stop = asyncio.Event()
        task = asyncio.create_task(Worker(deps, db_url).run(stop))
        try:
            await until(db_url, "SELECT status NOT IN ('queued', 'running') FROM executions"
                                " WHERE id = %s", (run_id,), timeout=600)
        finally:
            stop.set()
            await task
            await deps.journal_writer.close()
            await provider.aclose()
            await http.aclose()
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    journal = await events(api, run_id)
    by_type: dict[str, list[dict]] = {}
    for event in journal:
        by_type.setdefault(event["type"], []).append(event["payload"])

    # The run ended with a recorded outcome, never a crash or a transport failure.
    assert run["status"] == "completed", (run["status"], run.get("reason"))
    assert run["outcome"] in ENDED_HONESTLY, (run["outcome"], run.get("reason"))
    assert journal[-1]["type"] == "run_complete"
    assert journal[-1]["payload"]["status"] == "completed"

    # Both aliases reached the real model, every answer streamed, every history well formed.
    agent_calls = [r for r in recorder.requests if r["model"] == AGENT_MODEL]
    judge_calls = [r for r in recorder.requests if r["model"] == JUDGE_MODEL]
    assert agent_calls, "the agent never called the model"
    assert all(r.get("stream") is True for r in recorder.requests)
    assert recorder.streamed and all(recorder.streamed), recorder.streamed
    for request in recorder.requests:
        assert history_problems(request["messages"]) == [], request["messages"]
    # Names first: the tool is named in the system prompt, or its schema was loaded.
    assert all("demo__get_record" in {t["function"]["name"] for t in r.get("tools", [])}
               or ("load_tools" in {t["function"]["name"] for t in r.get("tools", [])}
                   and "demo__get_record" in r["messages"][0]["content"])
               for r in agent_calls)
    assert not any(r.get("tools") for r in judge_calls)
    # Text the model wrote reached the journal as it streamed.
    wrote = any(m.get("role") == "assistant" and m.get("content")
                for r in recorder.requests for m in r["messages"])
    assert not wrote or by_type.get("content_delta"), "streamed text was never journaled"
    if run["outcome"] in {"done", "question"}:
        assert judge_calls, "the run stopped as done/question without asking the judge"
    if gate := by_type.get("gate_decision"):
        assert all("verdict" in g and "reason" in g for g in gate)

    # Each tool call the model made went through the walls into the journal, under the
    # harness's own id, and was answered: executed (tool_start + tool_complete) or refused.
    sent_ids = set(called_ids(max(agent_calls, key=lambda r: len(r["messages"]))["messages"]))
    started = {p["call_id"] for p in by_type.get("tool_start", [])}
    completed = {p["call_id"] for p in by_type.get("tool_complete", [])}
    refused = {p["call_id"] for p in by_type.get("budget_refusal", [])}
    assert started == completed
    assert sent_ids <= started | refused, (sent_ids, started, refused)
    assert all(i.startswith("call_") for i in started | refused)

    # Usage: the journal has each call's figures as the server reported them, the run their sum.
    usage = by_type.get("model_usage", [])
    assert 1 <= len(usage) <= len(recorder.requests)
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage), usage
    assert run["usage"] == {"input_tokens": sum(u["input_tokens"] for u in usage),
                            "output_tokens": sum(u["output_tokens"] for u in usage),
                            "model_calls": len(usage)}
    # What the tiny model did this time (shown with -s; the assertions above hold for any run).
    print(f"\nrealmodel run: {run['outcome']} ({run.get('reason')}); agent calls "
          f"{len(agent_calls)}, judge calls {len(judge_calls)}; tool calls executed "
          f"{len(started)}, refused {len(refused)}; content_delta events "
          f"{len(by_type.get('content_delta', []))}; usage {run['usage']}")
