"""Long conversations (issue 29, item 5): past a share of the model's window, or on a
context-length refusal, the older part of the conversation is summarised by the `summary`
alias and what is sent is the instructions, the task, the summary and the recent turns
verbatim; the run keeps the summary (across a suspension too), the journal keeps everything
and says what the compaction freed, and a summariser that fails leaves the run masked.

Real worker, queue and journal; the model is the scripted provider (wrapped to record what it
was sent and to report what that weighs) or the hostile OpenAI-compatible server."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

from tests.factories import queue_run
from tests.hostile_history import message_chars
from tests.hostile_model import HostileModel, call, reply
from tests.integration.test_honest_runs import done, of_type, suspended
from tests.integration.test_hostile_model import (assert_every_history_well_formed,
                                                  assert_usage_is_what_the_server_reported,
                                                  ended, new_agent, why)
from tests.integration.test_run_loop_promises import Recording, agent, run_through, size, worker
from tests.integration.test_worker_runs import events
from tests.integration.workers import hostile_deps, scalar, serving, until
from tickwork.worker.model import Usage

# Fifty reads need walls above the defaults (40 per tool, 100 external calls in all).
ROOMY = {"per_tool_cap": 200, "aggregate_cap": 200, "hard_cap": 400}
SUMMARY = "Records 1 to N were read; each has an id and a title. Nothing else remains open."


class Measuring(Recording):
    """The scripted provider reporting, as a real server does, the input tokens of what it
    was sent (characters / 4) for the agent's turns; the summary reports the script's."""

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        answer = await super().complete(alias, messages, tools, run, on_text=on_text)
        if alias == "default":
            answer.usage = Usage(size(messages) // 4, 5)
        return answer


def reads(turns: int) -> list[dict]:
    return [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": n + 1}}]}
            for n in range(turns)]


def sent_to(provider: Recording, alias: str = "default") -> list[list]:
    return [messages for a, messages in provider.sent if a == alias]


def answered_within(messages) -> bool:
    wire = [m.to_openai() if hasattr(m, "to_openai") else m for m in messages]
    called = {c["id"] for m in wire for c in m.get("tool_calls") or []}
    answered = [m["tool_call_id"] for m in wire if m["role"] == "tool"]
    return sorted(called) == sorted(answered)


async def test_a_fifty_turn_run_compacts_once_past_the_threshold_and_keeps_working(api, pool,
                                                                                  db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run_input = {"script": reads(50) + [{"text": "Read fifty records."}],
                 "summary": {"text": SUMMARY, "usage": {"input_tokens": 900,
                                                        "output_tokens": 60}}}
    probe = Measuring()
    await run_through(api, pool, db_url, agent_id, run_input, provider=probe,
                      context_compact_tokens=10**9, **ROOMY)
    weights = [size(m) // 4 for m in sent_to(probe)]
    assert weights == sorted(weights)  # without compaction every turn weighs more
    threshold = weights[29]  # the 30th call reaches it: the 31st is sent compacted

    provider = Measuring()
    run, journal = await run_through(api, pool, db_url, agent_id, run_input, provider=provider,
                                     context_compact_tokens=threshold, **ROOMY)
    assert (run["status"], run["outcome"]) == ("completed", "done"), run["reason"]
    assert [c["ok"] for c in of_type(journal, "tool_complete")] == [True] * 50
    compacted = of_type(journal, "context_compacted")
    assert len(compacted) == 1 and len(sent_to(provider, "summary")) == 1
    event = compacted[0]
    assert event["ok"] and event["reason"] == "threshold" and event["alias"] == "summary"
    assert event["reported_input_tokens"] >= threshold == event["threshold"]
    # Everything but the task and the three newest turns: 27 turns of a call and its result.
    assert event["messages_summarised"] == 27 * 2
    assert event["summary_chars"] == len(SUMMARY)
    assert event["freed_tokens_estimate"] == (event["before_tokens_estimate"]
                                              - event["after_tokens_estimate"]) > 0

    # The summariser read the older turns; the model was then sent the summary and the recent
    # turns verbatim, and every later call reused the summary without another.
    prompt = sent_to(provider, "summary")[0][1].content
    assert '"id": 1' in prompt and '"id": 27' in prompt and '"id": 28}' not in prompt
    calls = sent_to(provider)
    assert len(calls) == 51
    first = calls[30]
    assert [m.content for m in first[:2]] == [probe.sent[0][1][0].content,
                                              probe.sent[0][1][1].content]
    assert first[2].role == "user" and first[2].content.endswith(SUMMARY)
    recent = first[3:]
    assert [c.arguments["id"] for m in recent for c in m.tool_calls] == [28, 29, 30]
    assert all(not m.content.startswith('{"masked"') for m in recent if m.role == "tool")
    assert len(first) == 3 + 6 and answered_within(first)
    for later in calls[31:]:
        assert later[2].content.endswith(SUMMARY) and answered_within(later)
    assert size(calls[30]) < size(calls[29]) // 2
    assert max(size(m) // 4 for m in calls[31:]) < threshold  # why it happened only once
    # The journal keeps every result; the summary's cost is in the run's usage.
    usage = of_type(journal, "model_usage")
    assert [u["alias"] for u in usage].count("summary") == 1
    reported = sum(size(m) // 4 for m in calls)
    assert run["usage"] == {"input_tokens": reported + 900,
                            "output_tokens": 5 * 51 + 60, "model_calls": 51 + 1 + 1}


@asynccontextmanager
async def routed_worker(pool, db_url, model: HostileModel, models: str, **settings):
    deps, provider = hostile_deps(pool, model.base_url, models, timeout=5,
                                  worker="compaction-test", **settings)
    async with serving(deps, db_url, provider=provider):
        yield


def read(n: int, tokens: int):
    return reply(None, call("demo.get_record", {"id": n}), usage=(tokens, 5))


async def test_through_the_hostile_server_the_summary_alias_is_asked_once_and_fits_the_history(
        api, pool, db_url):
    """Fifty streamed turns whose reported input grows past 1000 tokens at the 31st: one
    request to the summary alias's model, then the history the server accepts is the
    instructions, the task, the summary and the three newest turns."""
    with HostileModel() as model:
        model.queue(*(read(n, 100 + 30 * n) for n in range(1, 31)),  # the 30th reports 1000
                    reply(SUMMARY, usage=(700, 60)),
                    *(read(n, 400) for n in range(31, 51)),
                    reply("Read fifty records.", usage=(400, 4)),
                    reply("done: fifty records were read", usage=(50, 3)))
        agent_row = await new_agent(api, ["demo.get_record"])
        run_id = await queue_run(api, agent_row["id"], {"prompt": "Read records 1 to 50."})
        async with routed_worker(pool, db_url, model,
                                 "default=openai:hostile-agent,judge=openai:hostile-judge,"
                                 "summary=openai:hostile-summary",
                                 context_compact_tokens=1000, **ROOMY):
            await until(db_url, *ended(run_id))
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        journal = await events(api, run_id)
        assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
        bodies = [r.body for r in model.requests]
        assert [b["model"] for b in bodies].count("hostile-summary") == 1
        asked = [b["model"] for b in bodies].index("hostile-summary")
        assert asked == 30 and "tools" not in bodies[asked]
        after = bodies[asked + 1]["messages"]
        assert [m["role"] for m in after[:3]] == ["system", "user", "user"]
        assert after[1]["content"] == "Read records 1 to 50." and after[2]["content"].endswith(
            SUMMARY)
        ids = [json.loads(c["function"]["arguments"])["id"] for m in after[3:]
               for c in m.get("tool_calls") or []]
        assert ids == [28, 29, 30]
        assert all(b["messages"][2]["content"].endswith(SUMMARY)
                   for b in bodies[asked + 1:-1])  # every later agent turn
        compacted = of_type(journal, "context_compacted")
        assert len(compacted) == 1 and compacted[0]["freed_tokens_estimate"] > 0
        assert_every_history_well_formed(model)
        await assert_usage_is_what_the_server_reported(api, run_id, model, journal)
        assert [u["alias"] for u in of_type(journal, "model_usage")].count("summary") == 1


async def test_a_context_length_refusal_forces_one_compaction_then_the_run_succeeds(api, pool,
                                                                                   db_url):
    """A server that reports no usage (so no threshold is ever seen) and enforces its context
    size: the refused turn gets one compaction (the summary alias falls back to the default
    model) and the masked retry, which fits, and the run goes on to its answer."""
    def conversation():
        return [*(reply(None, call("demo.list_records", {"offset": 10 * n, "limit": 10}))
                  for n in range(8)), reply("Eighty records listed."), reply("done")]

    with HostileModel() as model:
        model.queue(*conversation())
        agent_row = await new_agent(api, ["demo.list_records"])
        models = "default=openai:hostile-agent,judge=openai:hostile-judge"
        first = await queue_run(api, agent_row["id"], {"prompt": "List eighty records."})
        async with routed_worker(pool, db_url, model, models):
            await until(db_url, *ended(first))
        sizes = [message_chars(r.body["messages"]) for r in model.requests]
        refused_at = 6  # the seventh turn: six turns before it, three of them summarisable
        # The premise: only that turn is too long (earlier ones and the judge's prompt fit).
        assert max(sizes[:refused_at] + sizes[-1:]) < sizes[refused_at] - 1, sizes
        model.requests.clear()
        model.context_chars = sizes[refused_at] - 1
        answers = conversation()
        answers.insert(refused_at, reply(SUMMARY))  # the summary, asked after the refusal
        model.queue(*answers)
        run_id = await queue_run(api, agent_row["id"], {"prompt": "List eighty records."})
        async with routed_worker(pool, db_url, model, models,
                                 model_context_tokens="8192,summary=1000"):
            await until(db_url, *ended(run_id))
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        journal = await events(api, run_id)
        assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
        statuses = [r.status for r in model.requests]
        assert statuses == [200] * refused_at + [400, 200, 200] + [200] * 3, statuses
        summary_body = model.requests[refused_at + 1].body
        assert summary_body["model"] == "hostile-agent" and "tools" not in summary_body
        assert message_chars(summary_body["messages"]) < 2 * 1000 * 4  # its bounded prompt
        compacted = of_type(journal, "context_compacted")
        assert [(c["reason"], c["ok"]) for c in compacted] == [("context_too_long", True)]
        assert len(of_type(journal, "context_masked")) == 1
        retried = model.requests[refused_at + 2].body["messages"]
        assert retried[2]["content"].endswith(SUMMARY)
        assert message_chars(retried) < model.context_chars
        assert_every_history_well_formed(model)


async def test_a_summariser_that_fails_leaves_the_run_masked_and_it_completes(api, pool, db_url):
    agent_id = await agent(api, ["demo.list_records"])
    provider = Recording()
    lists = [{"tool_calls": [{"name": "demo.list_records",
                              "arguments": {"offset": 5 * n, "limit": 5}}],
              "usage": {"input_tokens": 5000, "output_tokens": 1}} for n in range(10)]
    run_input = {"script": lists + [{"text": "Listed fifty records."}],
                 "summary": {"fail": "the summary model is down"}}
    run, journal = await run_through(api, pool, db_url, agent_id, run_input, provider=provider,
                                     context_compact_tokens=1000)
    assert (run["status"], run["outcome"]) == ("completed", "done"), run["reason"]
    failed = of_type(journal, "context_compacted")
    assert [f["ok"] for f in failed] == [False, False]  # then it is not asked again
    assert all("the summary model is down" in f["error"] for f in failed)
    assert len(sent_to(provider, "summary")) == 2
    last = sent_to(provider)[-1]
    assert not any("was summarised" in m.content for m in last)
    masked = [m for m in last if m.role == "tool" and m.content.startswith('{"masked"')]
    assert len(masked) == 10 - 3  # the masking it falls back to
    assert len(of_type(journal, "tool_complete")) == 10


async def test_a_summary_survives_a_suspension_and_the_resumed_run_reuses_it(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record", "demo.send_message"])
    heavy = {"input_tokens": 5000, "output_tokens": 1}
    script = reads(6) + [
        {**reads(7)[-1], "usage": heavy},  # past the threshold: the next turn is compacted
        {"tool_calls": [{"name": "demo.send_message",
                         "arguments": {"recipient": "ops", "text": "seven read"}}]},
        {"text": "Sent."}]
    run_input = {"script": script, "summary": {"text": SUMMARY,
                                               "usage": {"input_tokens": 300,
                                                         "output_tokens": 30}}}
    run_id = await queue_run(api, agent_id, run_input)
    before = Recording()
    async with worker(pool, db_url, provider=before, context_compact_tokens=1000):
        await until(db_url, *suspended(run_id))
    assert len(sent_to(before, "summary")) == 1
    saved = scalar(db_url, "SELECT state FROM run_states WHERE execution_id = %s", (run_id,))
    assert saved["summary"]["text"] == SUMMARY and saved["summary"]["messages"] == 8

    pending = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
    assert (await api.post(f"/v1/approvals/{pending[0]['id']}/approve")).status_code == 200
    after = Recording()
    async with worker(pool, db_url, provider=after, context_compact_tokens=1000):
        await until(db_url, *done(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    journal = await events(api, run_id)
    assert (run["status"], run["outcome"]) == ("completed", "done"), run["reason"]
    assert sent_to(after, "summary") == []  # reused, not asked again
    resumed = sent_to(after)[0]
    assert resumed[2].content.endswith(SUMMARY) and answered_within(resumed)
    # The head, the summary, then turns 5 to 8 (the send) verbatim: not the 8 turns whole.
    assert len(resumed) == 2 + 1 + 4 * 2
    assert len(of_type(journal, "context_compacted")) == 1
    assert run["usage"]["input_tokens"] == 5000 + 300
