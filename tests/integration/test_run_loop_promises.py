"""The run loop's promises with models that behave like real ones (issue 12, worker side):
harness-named calls, local tools for every agent, deny by default, bounded context, a per-call
tool timeout, usage and a token budget, streaming, and the stop gate's strictness.

The provider is injected (the scripted one, or a small wrapper of it that records what it was
sent, enforces a context size or streams); the database, queue and journal are real."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

import psycopg

from tests.factories import queue_run
from tests.integration.test_honest_runs import done, of_type, suspended
from tests.integration.test_worker_runs import events
from tests.integration.workers import run_deps, scalar, until
from tickwork.worker.model import ContextTooLong, Reply, Usage
from tickwork.worker.providers.scripted import ScriptedProvider
from tickwork.worker.runner import Worker
from tickwork.worker.stop_gate import EMPTY_REPLY
from tickwork.worker.tools.registry import ToolSpec, arguments_model, parameters_schema


class Recording:
    """The scripted provider, remembering every request (alias, messages) it was sent."""

    def __init__(self) -> None:
        self.inner = ScriptedProvider()
        self.sent: list[tuple[str, list]] = []

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        self.sent.append((alias, list(messages)))
        return await self.inner.complete(alias, messages, tools, run, on_text=on_text)

    async def aclose(self) -> None:
        pass


def size(messages) -> int:
    return sum(len(json.dumps(m.to_openai())) for m in messages)


class ContextLimit(Recording):
    """Refuses a default-alias request whose messages exceed ``limit`` characters, as a real
    server refuses one over the model's context length."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.refused = limit, 0

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        if alias == "default" and size(messages) > self.limit:
            self.sent.append((alias, list(messages)))
            self.refused += 1
            raise ContextTooLong(f"maximum context length is {self.limit}; "
                                 f"the request has {size(messages)}")
        return await super().complete(alias, messages, tools, run, on_text=on_text)


class Streaming(Recording):
    """Streams each text reply in pieces through on_text, a little apart, like a server."""

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        reply = await super().complete(alias, messages, tools, run)
        if alias != "default" or on_text is None or not reply.text:
            return reply
        for i in range(0, len(reply.text), 2):
            on_text(reply.text[i:i + 2])
            await asyncio.sleep(0.03)
        reply.streamed = True
        return reply


@asynccontextmanager
async def worker(pool, db_url, *, provider=None, extra=(), **settings):
    deps = run_deps(pool, **settings)
    if provider is not None:
        deps.provider = provider
    for spec in extra:
        deps.catalog[spec.key] = spec
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(deps, db_url).run(stop))
    try:
        yield deps
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await deps.journal_writer.close()


async def agent(api, tools, auto_approve=(), name="promises", db_url=None, raw_tools=None):
    response = await api.post("/v1/agents", json={"name": name, "tools": list(tools),
                                                  "auto_approve": list(auto_approve)})
    assert response.status_code == 201, response.text
    agent_id = response.json()["id"]
    if raw_tools is not None:  # test-only tools the API's catalog does not know
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE agents SET tools = %s WHERE id = %s", (list(raw_tools), agent_id))
    return agent_id


async def run_through(api, pool, db_url, agent_id, run_input, **kw):
    run_id = await queue_run(api, agent_id, run_input)
    async with worker(pool, db_url, **kw):
        await until(db_url, *done(run_id))
    return (await api.get(f"/v1/runs/{run_id}")).json(), await events(api, run_id)


def send(text: str, own_id="call_0") -> dict:
    call = {"name": "demo.send_message", "arguments": {"recipient": "ops", "text": text}}
    return {**call, "id": own_id} if own_id is not ... else call


def outbox(db_url: str) -> list[str]:
    with psycopg.connect(db_url) as conn:
        return [r[0] for r in conn.execute("SELECT text FROM demo_outbox ORDER BY text")]


DUPLICATES = {"script": [{"tool_calls": [send("a"), send("b")]},
                         {"tool_calls": [send("c"), send("d")]},
                         {"text": "Sent four."}]}


# --- 1. harness call ids ----------------------------------------------------------------------

async def test_sends_sharing_one_model_id_within_and_across_turns_are_each_delivered(api, pool,
                                                                                   db_url):
    agent_id = await agent(api, ["demo.send_message"], auto_approve=["demo.send_message"])
    provider = Recording()
    run, journal = await run_through(api, pool, db_url, agent_id, DUPLICATES, provider=provider)
    assert run["outcome"] == "done"
    assert outbox(db_url) == ["a", "b", "c", "d"]
    completes = of_type(journal, "tool_complete")
    assert len(completes) == 4 and not any(c["replayed"] for c in completes)
    assert len({c["call_id"] for c in completes}) == 4
    assert {s["provider_id"] for s in of_type(journal, "tool_start")} == {"call_0"}
    # What the model was sent back: every call answered exactly once, under the harness's ids.
    history = [m.to_openai() for m in provider.sent[-2][1]]
    asked = [c["id"] for m in history for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered) and len(set(asked)) == 4
    assert "call_0" not in asked


async def decide_all(api, pool, db_url, run_id: str, expected: int) -> list[str]:
    """Approve each pending approval of the run in turn, resuming it in between."""
    decided = []
    for _ in range(expected):
        pending = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
        assert len(pending) == 1, pending
        approval_id = pending[0]["id"]
        response = await api.post(f"/v1/approvals/{approval_id}/approve")
        assert response.status_code == 200, response.text
        decided.append(approval_id)
        async with worker(pool, db_url):  # until it pauses again or ends
            await until(db_url, "SELECT (SELECT count(*) = 1 FROM approvals WHERE status = "
                                "'pending') OR (SELECT status IN ('completed', 'failed', "
                                "'cancelled') AND breadcrumb IS NULL FROM executions "
                                "WHERE id = %s)", (run_id,))
    return decided


async def test_with_approval_each_same_id_send_gets_its_own_decidable_approval(api, pool, db_url):
    agent_id = await agent(api, ["demo.send_message"])
    run_id = await queue_run(api, agent_id, DUPLICATES)
    async with worker(pool, db_url):
        await until(db_url, *suspended(run_id))
    decided = await decide_all(api, pool, db_url, run_id, 4)
    await until(db_url, *done(run_id))
    assert len(set(decided)) == 4
    assert outbox(db_url) == ["a", "b", "c", "d"]
    journal = await events(api, run_id)
    assert not any(c["replayed"] for c in of_type(journal, "tool_complete"))
    assert (await api.get(f"/v1/runs/{run_id}")).json()["outcome"] == "done"


async def test_odd_long_or_missing_model_ids_give_short_url_safe_approval_ids(api, pool, db_url):
    agent_id = await agent(api, ["demo.send_message"])
    script = {"script": [{"tool_calls": [send("slash", "a/b?c=d#e"), send("long", "x" * 300),
                                         send("missing", None)]}, {"text": "Sent."}]}
    run_id = await queue_run(api, agent_id, script)
    async with worker(pool, db_url):
        await until(db_url, *suspended(run_id))
    decided = await decide_all(api, pool, db_url, run_id, 3)
    await until(db_url, *done(run_id))
    assert all(len(a) < 80 and "/" not in a and "?" not in a for a in decided)
    assert outbox(db_url) == ["long", "missing", "slash"]


# --- 2. local tools and deny by default -------------------------------------------------------

async def test_an_agent_that_lists_no_local_tool_can_still_query_files_and_plan(api, pool, db_url):
    agent_id = await agent(api, ["demo.list_records"])
    plan = lambda status: {"name": "update_plan", "arguments": {"steps": [
        {"title": "count records", "status": status}]}}
    script = {"script": [
        {"tool_calls": [plan("in_progress"), {"name": "demo.list_records",
                                               "arguments": {"limit": 500}}]},
        {"tool_calls": [{"name": "query_file", "arguments": {
            "file_ref": "$last_file_ref", "sql": "SELECT count(*) AS n FROM result"}}]},
        {"text": "Counted."},
        {"tool_calls": [plan("completed")]}, {"text": "There are 500."}]}
    run, journal = await run_through(api, pool, db_url, agent_id, script)
    assert not of_type(journal, "budget_refusal")
    completes = of_type(journal, "tool_complete")
    assert [c["tool"] for c in completes] == ["update_plan", "demo.list_records", "query_file",
                                              "update_plan"]
    assert all(c["ok"] for c in completes)
    assert [g["verdict"] for g in of_type(journal, "gate_decision")] == ["plan_open",
                                                                          "plan_complete"]
    assert run["outcome"] == "done"


async def probe(ctx, note: str) -> dict:
    """A test-only vendor tool."""
    return {"probed": note}


def spec(key: str, tool_class, function=probe) -> ToolSpec:
    return ToolSpec(key, tool_class, False, "test tool", parameters_schema(function), function,
                    arguments_model(function))


async def test_a_tool_with_no_class_or_an_unknown_class_waits_for_a_person(api, pool, db_url):
    extra = [spec("test.classless", None), spec("test.launch", "execute")]
    agent_id = await agent(api, ["demo.get_record"], db_url=db_url,
                           raw_tools=["test.classless", "test.launch"])
    script = {"script": [{"tool_calls": [{"name": "test.classless", "arguments": {"note": "1"}},
                                         {"name": "test.launch", "arguments": {"note": "2"}}]},
                         {"text": "Probed."}]}
    run_id = await queue_run(api, agent_id, script)
    async with worker(pool, db_url, extra=extra):
        await until(db_url, *suspended(run_id))
        pending = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
        assert [p["tool"] for p in pending] == ["test.classless"]
        assert not of_type(await events(api, run_id), "tool_start")
        await api.post(f"/v1/approvals/{pending[0]['id']}/approve")
        await until(db_url, "SELECT count(*) = 2 FROM approvals")
        pending = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
        assert [p["tool"] for p in pending] == ["test.launch"]
        await api.post(f"/v1/approvals/{pending[0]['id']}/approve")
        await until(db_url, *done(run_id))
    starts = of_type(await events(api, run_id), "tool_start")
    assert [s["tool"] for s in starts] == ["test.classless", "test.launch"]
    assert all(s["approval_id"] for s in starts)


# --- 3. bounded context -----------------------------------------------------------------------

def reads(turns: int) -> list[dict]:
    return [{"tool_calls": [{"name": "demo.list_records",
                             "arguments": {"offset": 5 * i, "limit": 5}}]} for i in range(turns)]


async def test_old_tool_results_are_masked_in_what_the_model_is_sent(api, pool, db_url):
    agent_id = await agent(api, ["demo.list_records"])
    provider = Recording()
    run, journal = await run_through(api, pool, db_url, agent_id,
                                     {"script": reads(8) + [{"text": "Read 40."}]},
                                     provider=provider, context_keep_turns=3)
    assert run["outcome"] == "done"
    last = [m for m in provider.sent if m[0] == "default"][-1][1]
    tool_results = [m.content for m in last if m.role == "tool"]
    assert len(tool_results) == 8  # every call still answered
    masked = [json.loads(c) for c in tool_results[:5]]
    assert all(m["masked"] and m["tool"] == "demo.list_records" for m in masked)
    assert all(not c.startswith('{"masked"') for c in tool_results[5:])
    # The journal keeps every result's size; the masking is only in what was sent.
    assert all(c["result_chars"] > 200 for c in of_type(journal, "tool_complete"))


async def test_a_context_too_long_answer_masks_older_results_and_retries_once(api, pool, db_url):
    agent_id = await agent(api, ["demo.list_records"])
    probe_run = Recording()
    await run_through(api, pool, db_url, agent_id, {"script": reads(6) + [{"text": "Read."}]},
                      provider=probe_run, context_keep_turns=50)
    sizes = [size(m) for a, m in probe_run.sent if a == "default"]
    provider = ContextLimit(limit=sizes[-1] - 1)  # only the last, unmasked request is too long
    run, journal = await run_through(api, pool, db_url, agent_id,
                                     {"script": reads(6) + [{"text": "Read."}]},
                                     provider=provider, context_keep_turns=50)
    assert (run["status"], run["outcome"]) == ("completed", "done")
    assert provider.refused == 1
    masked = of_type(journal, "context_masked")
    assert len(masked) == 1 and masked[0]["keep_turns"] == 1 and masked[0]["masked_results"] == 5
    assert "maximum context length" in masked[0]["error"]


TWO_READS = {"script": [{"tool_calls": [{"name": "demo.list_records",
                                          "arguments": {"offset": 5 * i, "limit": 5}}]}
                        for i in range(2)] + [{"text": "never"}]}


async def test_a_second_context_too_long_answer_fails_the_run_with_a_reason(api, pool, db_url):
    agent_id = await agent(api, ["demo.list_records"])
    probe_run = Recording()
    await run_through(api, pool, db_url, agent_id, TWO_READS, provider=probe_run)
    sizes = [size(m) for a, m in probe_run.sent if a == "default"]
    # The second turn fits; the third does not, even with the first result masked.
    provider = ContextLimit(limit=sizes[1] + 20)
    run, journal = await run_through(api, pool, db_url, agent_id, TWO_READS, provider=provider,
                                     context_keep_turns=50)
    assert (run["status"], run["outcome"]) == ("failed", "failed")
    assert "no longer fits the model's context even with every tool result" in run["reason"]
    assert provider.refused == 2  # the call and its one retry: never a loop
    assert len(of_type(journal, "context_masked")) == 1
    assert journal[-1]["type"] == "run_complete"


async def test_a_context_too_long_answer_with_nothing_left_to_mask_fails_without_a_retry(
        api, pool, db_url):
    agent_id = await agent(api, ["demo.list_records"])
    provider = ContextLimit(limit=600)  # the first result alone is more than that
    run, journal = await run_through(api, pool, db_url, agent_id, TWO_READS, provider=provider)
    assert (run["status"], run["outcome"]) == ("failed", "failed")
    assert "nothing more could be masked" in run["reason"]
    assert provider.refused == 1 and not of_type(journal, "context_masked")


# --- 4. a per-call timeout for vendor tools ---------------------------------------------------

async def hang(ctx, note: str) -> dict:
    """A test-only vendor tool that never finishes."""
    await asyncio.Event().wait()


async def test_a_hung_vendor_tool_is_a_failed_call_told_to_the_model_and_the_run_goes_on(
        api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"], db_url=db_url,
                           raw_tools=["test.hang", "demo.get_record"])
    script = {"script": [{"tool_calls": [{"name": "test.hang", "arguments": {"note": "x"}}]},
                         {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
                         {"text": "Done without it."}]}
    provider = Recording()
    run, journal = await run_through(api, pool, db_url, agent_id, script, provider=provider,
                                     extra=[spec("test.hang", "read", hang)],
                                     tool_timeout_seconds=1.5)
    assert (run["status"], run["outcome"]) == ("completed", "done")
    completes = of_type(journal, "tool_complete")
    assert [(c["tool"], c["ok"]) for c in completes] == [("test.hang", False),
                                                         ("demo.get_record", True)]
    told = [m.content for m in provider.sent[1][1] if m.role == "tool"][0]
    assert "stopped after 1.5 s" in told and "may or may not have had an effect" in told


# --- 5. the gate and run control ---------------------------------------------------------------

async def test_the_judge_sees_exactly_the_last_eight_messages(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    script = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": i}}]}
              for i in range(1, 6)] + [{"text": "Five records read."}]
    provider = Recording()
    await run_through(api, pool, db_url, agent_id, {"script": script}, provider=provider)
    (alias, prompt), = [s for s in provider.sent if s[0] == "judge"]
    transcript = prompt[1].content
    rendered = [line for line in transcript.splitlines()
                if line.split(":")[0] in ("system", "user", "assistant", "tool")]
    assert len(rendered) == 8
    # 13 messages: system, task, 5 x (call, result), answer; the window starts at the 3rd call.
    assert '-> calls demo.get_record({"id": 3})' in transcript
    assert '"id": 2})' not in transcript and "user: " not in transcript
    assert rendered[-1] == "assistant: Five records read."


async def test_an_empty_reply_is_stalled_without_asking_the_judge(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run, journal = await run_through(api, pool, db_url, agent_id,
                                     {"script": [{"text": ""}, {"text": "Which region?"}],
                                      "judge": ["question", "done"]})
    gates = of_type(journal, "gate_decision")
    assert [(g["verdict"], g["reason"]) for g in gates][0] == ("stalled", EMPTY_REPLY)
    assert gates[1]["verdict"] == "question"  # the judge's first verdict went to the 2nd stop
    assert run["outcome"] == "question" and gates[0]["units_left"] == 19


async def test_a_judge_that_rambles_starting_with_done_never_ends_the_run_as_done(api, pool,
                                                                                   db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run, journal = await run_through(api, pool, db_url, agent_id, {
        "script": [{"text": "Partial."}, {"text": "Complete."}],
        "judge": ["Done with my review; the agent seems to have mostly answered.", "done"]})
    assert [g["verdict"] for g in of_type(journal, "gate_decision")] == ["stalled", "done"]


async def test_hard_stop_and_cancel_gate_decisions_carry_units_left(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run, journal = await run_through(api, pool, db_url, agent_id, {"script": [
        {"repeat": {"tool": "demo.get_record", "times": 50, "vary": "id"}}]}, hard_cap=3)
    hard = of_type(journal, "gate_decision")[-1]
    assert (hard["verdict"], hard["units_left"]) == ("hard_stop", 20)
    slow = await queue_run(api, agent_id, {"script": [
        {"sleep": 1.5}, {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
        {"text": "should not get here"}]})
    async with worker(pool, db_url):
        await until(db_url, "SELECT status = 'running' FROM executions WHERE id = %s", (slow,))
        assert (await api.post(f"/v1/runs/{slow}/cancel")).status_code == 202
        await until(db_url, *done(slow))
    cancelled = of_type(await events(api, slow), "gate_decision")[-1]
    assert (cancelled["verdict"], cancelled["units_left"]) == ("cancelled", 20)


# --- 6. usage and a token budget ---------------------------------------------------------------

def costly(turn: dict, tokens_in: int, tokens_out: int) -> dict:
    return {**turn, "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}


async def test_usage_is_journaled_per_call_and_summed_on_the_run_across_a_pause(api, pool, db_url):
    agent_id = await agent(api, ["demo.send_message", "demo.get_record"])
    script = {"script": [
        costly({"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]}, 100, 10),
        costly({"tool_calls": [send("report", ...)]}, 150, 20),
        costly({"text": "Sent."}, 200, 5)]}
    run_id = await queue_run(api, agent_id, script)
    async with worker(pool, db_url):
        await until(db_url, *suspended(run_id))
    saved = scalar(db_url, "SELECT usage FROM executions WHERE id = %s", (run_id,))
    assert saved == {"input_tokens": 250, "output_tokens": 30, "model_calls": 2}
    await decide_all(api, pool, db_url, run_id, 1)
    await until(db_url, *done(run_id))
    usage = of_type(await events(api, run_id), "model_usage")
    assert usage == [{"alias": "default", "input_tokens": n, "output_tokens": m}
                     for n, m in ((100, 10), (150, 20), (200, 5))]
    final = scalar(db_url, "SELECT usage FROM executions WHERE id = %s", (run_id,))
    # The scripted judge reports no usage but is a model call all the same.
    assert final == {"input_tokens": 450, "output_tokens": 35, "model_calls": 4}


async def test_a_token_budget_ends_the_run_like_the_hard_cap(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    # One turn that repeats for ever: each costs 50 tokens.
    loop = {"script": [costly({"tool_calls": [{"name": "demo.get_record",
                                               "arguments": {"id": 1}}]}, 40, 10)]}
    run, journal = await run_through(api, pool, db_url, agent_id, loop, token_budget=120)
    assert (run["status"], run["outcome"]) == ("completed", "hard_stop")
    assert "token budget of 120" in run["reason"]
    gate = of_type(journal, "gate_decision")[-1]
    assert gate["verdict"] == "hard_stop" and "token budget" in gate["reason"]
    assert gate["units_left"] == 20
    final = [p for p in of_type(journal, "content_delta") if p.get("injected")]
    assert len(final) == 1 and "150 tokens" in final[0]["text"]
    assert len(of_type(journal, "model_usage")) == 3  # 50, 100, 150: the third crossed it


# --- 7. streaming text ---------------------------------------------------------------------------

async def test_streamed_text_is_journaled_in_batches_and_not_again_whole(api, pool, db_url):
    agent_id = await agent(api, ["demo.get_record"])
    text = "Record one is an invoice for ACME, dated the third of May, unpaid, due in June."
    run, journal = await run_through(api, pool, db_url, agent_id, {"script": [{"text": text}]},
                                     provider=Streaming())
    deltas = of_type(journal, "content_delta")
    assert "".join(d["text"] for d in deltas) == text
    assert all(d.get("streamed") for d in deltas)
    assert 1 < len(deltas) < len(range(0, len(text), 2))  # batched, not one per piece
    assert run["outcome"] == "done"


class JudgeLimit(Recording):
    """Refuses a judge request over ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        if alias == "judge" and size(messages) > self.limit:
            raise ContextTooLong(f"maximum context length is {self.limit}")
        return await super().complete(alias, messages, tools, run, on_text=on_text)


LONG_ANSWER = {"script": [{"text": "The summary: " + "records look fine; " * 200}]}


async def test_a_judge_whose_prompt_is_too_long_is_asked_again_with_a_shorter_one(api, pool,
                                                                                  db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run, journal = await run_through(api, pool, db_url, agent_id, LONG_ANSWER,
                                     provider=JudgeLimit(limit=3500))
    assert run["outcome"] == "done"
    masked = of_type(journal, "context_masked")
    assert len(masked) == 1 and masked[0]["alias"] == "judge"


async def test_a_judge_that_cannot_be_asked_at_all_counts_as_stalled_never_done(api, pool,
                                                                                db_url):
    agent_id = await agent(api, ["demo.get_record"])
    run, journal = await run_through(api, pool, db_url, agent_id, LONG_ANSWER,
                                     provider=JudgeLimit(limit=100))
    gates = of_type(journal, "gate_decision")
    assert gates[0]["verdict"] == "stalled" and "too long" in gates[0]["reason"]
    assert run["outcome"] == "stalled_out" and gates[-1]["verdict"] == "stalled_out"
