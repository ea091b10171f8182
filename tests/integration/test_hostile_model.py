"""R11: a real worker driven by a hostile OpenAI-compatible server (tests/hostile_model.py) through
the openai provider, streaming. The server picks duplicate, reused, odd and missing call ids,
sends `content: null` and malformed arguments, fails with 429/500/silence and context-length
errors, reports usage, and refuses any malformed history with a 400 like the real API."""

from __future__ import annotations

import re
from contextlib import asynccontextmanager

import pytest

from tests.factories import create_agent, queue_run
from tests.hostile_history import history_problem, message_chars
from tests.hostile_model import (HostileModel, call, context_too_long, reply, server_error,
                                 silence, too_many_requests)
from tests.integration.test_worker_runs import events
from tests.integration.workers import hostile_deps, scalar, serving, until

SEND = "demo.send_message"
URL_SAFE = re.compile(r"[A-Za-z0-9._~:-]{1,100}")


@pytest.fixture
def model():
    with HostileModel() as hostile:
        yield hostile


@asynccontextmanager
async def hostile_worker(pool, db_url, model: HostileModel, *, model_timeout: float = 1,
                         **settings):
    """A worker whose every model call (the judge's too) goes to the hostile server."""
    deps, provider = hostile_deps(
        pool, model.base_url, "default=openai:hostile-agent,judge=openai:hostile-judge",
        timeout=model_timeout, worker="hostile-test", **settings)
    async with serving(deps, db_url, provider=provider):
        yield


_names = iter(range(1, 1_000_000))


async def new_agent(api, tools, auto_approve=()) -> dict:
    """An agent told to send, under a name of its own in this module."""
    return await create_agent(api, f"hostile-{next(_names)}", tools=list(tools),
                              instructions="Send what you are asked to send.",
                              auto_approve=list(auto_approve))


def ended(run_id: str) -> tuple[str, tuple]:
    return ("SELECT status IN ('completed', 'failed', 'cancelled') AND breadcrumb IS NULL"
            " FROM executions WHERE id = %s", (run_id,))


def pending_approvals(run_id: str, n: int) -> tuple[str, tuple]:
    return ("SELECT count(*) = %s AND bool_or(status = 'pending') FROM approvals"
            " WHERE execution_id = %s", (n, run_id))


def why(run: dict, model: HostileModel) -> tuple:
    """What a failed assertion on a run's end shows: its reason and any history refused."""
    return run["reason"], [(r.problem, r.body["messages"]) for r in model.requests if r.problem]


def of_type(journal, kind):
    return [e["payload"] for e in journal if e["type"] == kind]


def send(text: str, id) -> object:
    return call(SEND, {"recipient": "ops", "text": text}, id=id)


async def approve_the_pending_one(api) -> str:
    pending = (await api.get("/v1/approvals", params={"status": "pending"})).json()["items"]
    assert len(pending) == 1 and pending[0]["tool"] == SEND
    approval_id = pending[0]["id"]
    assert URL_SAFE.fullmatch(approval_id), approval_id
    decided = await api.post(f"/v1/approvals/{approval_id}/approve")
    assert decided.status_code == 200 and decided.json()["status"] == "approved", decided.text
    return approval_id


def assert_every_history_well_formed(model: HostileModel) -> None:
    assert model.refused_histories() == []  # the server would have answered 400
    for recorded in model.requests:
        messages = recorded.body["messages"]
        assert history_problem(messages) is None
        ids = [c["id"] for m in messages for c in m.get("tool_calls") or []]
        assert len(ids) == len(set(ids)) and all(URL_SAFE.fullmatch(i) for i in ids)


async def assert_usage_is_what_the_server_reported(api, run_id: str, model: HostileModel,
                                                   journal) -> None:
    prompt, completion, calls = model.usage_served()
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert run["usage"] == {"input_tokens": prompt, "output_tokens": completion,
                            "model_calls": calls}
    per_call = of_type(journal, "model_usage")
    assert len(per_call) == calls
    assert (sum(u["input_tokens"] for u in per_call),
            sum(u["output_tokens"] for u in per_call)) == (prompt, completion)


async def test_four_sends_with_hostile_ids_are_each_delivered_once(api, pool, db_url, model):
    odd_id = "calls/" + "x" * 294  # a '/' and 300 characters
    model.queue(
        # Turn 1: content null, the same id twice; neither send is auto-approved.
        reply(None, send("report A", "call_0"), send("report B", "call_0"), usage=(100, 11)),
        # Turn 2, after a 429: call_0 again (reused from turn 1) and a 300-character id with '/'.
        too_many_requests("0.1"),
        reply("Two more.", send("report C", "call_0"), send("report D", odd_id), usage=(200, 22)),
        # Turn 3, after a 500: a call without an id and with arguments that are not JSON.
        server_error(),
        reply(None, call("demo.get_record", '{"id": 7', id=None), usage=(300, 5)),
        # Turn 4, after silence past the timeout: the answer, then the judge's verdict.
        silence(3),
        reply("All four reports were sent.", usage=(400, 33)),
        reply("done: the four reports went out", usage=(50, 4)))
    agent = await new_agent(api, [SEND, "demo.get_record"])
    run_id = await queue_run(api, agent["id"], {"prompt": "Send the four reports."})
    async with hostile_worker(pool, db_url, model):
        await until(db_url, *pending_approvals(run_id, 1))
        first = await approve_the_pending_one(api)  # report A, by a person
        await until(db_url, *pending_approvals(run_id, 2))
        # The operator now trusts the tool: later sends of this run need no one.
        put = await api.put(f"/v1/agents/{agent['id']}",
                            json={**{k: agent[k] for k in ("name", "instructions", "tools")},
                                  "auto_approve": [SEND]})
        assert put.status_code == 200, put.text
        second = await approve_the_pending_one(api)  # report B, by a person
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    journal = await events(api, run_id)

    assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
    assert run["reason"]
    outbox = scalar(db_url, "SELECT array_agg(text ORDER BY text) FROM demo_outbox")
    assert outbox == ["report A", "report B", "report C", "report D"]
    assert first != second
    assert scalar(db_url, "SELECT array_agg(status) FROM approvals WHERE execution_id = %s",
                  (run_id,)) == ["approved", "approved"]
    sends = [p for p in of_type(journal, "tool_start") if p["tool"] == SEND]
    assert len({p["call_id"] for p in sends}) == 4
    assert [p.get("approval_id") for p in sends] == [first, second, None, None]
    assert [p.get("auto_approved", False) for p in sends] == [False, False, True, True]
    # The model's ids are kept for logs only (and kept short).
    assert [p.get("provider_id") for p in sends][:3] == ["call_0"] * 3
    assert odd_id.startswith(sends[3]["provider_id"]) and len(sends[3]["provider_id"]) <= 200
    assert not [p for p in of_type(journal, "tool_complete") if p.get("replayed")]

    assert_every_history_well_formed(model)
    assert [r.status for r in model.requests] == [200, 429, 200, 500, 200, 200, 200, 200]
    # The malformed arguments were told to the model, not a crash.
    told = model.requests[-2].body["messages"][-1]
    assert told["role"] == "tool" and "not valid JSON" in told["content"]
    # The answer was streamed into the journal as it was written.
    streamed = [p["text"] for p in of_type(journal, "content_delta") if p.get("streamed")]
    assert "".join(streamed).endswith("All four reports were sent.")
    await assert_usage_is_what_the_server_reported(api, run_id, model, journal)


async def test_a_context_length_refusal_is_answered_by_one_masked_retry(api, pool, db_url, model):
    reads = [reply(None, call("demo.list_records", {"offset": 10 * n, "limit": 10}),
                   usage=(10, 1)) for n in range(3)]
    model.queue(*reads, context_too_long(), reply("Thirty records listed.", usage=(20, 2)),
                reply("done", usage=(5, 1)))
    agent = await new_agent(api, ["demo.list_records"])
    run_id = await queue_run(api, agent["id"], {"prompt": "List thirty records."})
    async with hostile_worker(pool, db_url, model):
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    journal = await events(api, run_id)
    assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
    masked = of_type(journal, "context_masked")
    assert len(masked) == 1 and masked[0]["retry"] == 1
    refused, retried = model.requests[3].body["messages"], model.requests[4].body["messages"]
    assert [r.status for r in model.requests] == [200, 200, 200, 400, 200, 200]
    assert len(retried) == len(refused) and message_chars(retried) < message_chars(refused)
    assert '"masked": true' in str([m["content"] for m in retried])
    assert_every_history_well_formed(model)
    await assert_usage_is_what_the_server_reported(api, run_id, model, journal)


async def test_a_server_enforcing_its_context_size_gets_the_masked_retry(api, pool, db_url,
                                                                        model):
    """The same conversation twice: once to measure what each request weighs, then with the
    server's context one character short of the heaviest turn, which must then be retried
    masked (and fit) rather than fail the run."""
    def conversation():
        return [*(reply(None, call("demo.list_records", {"offset": 10 * n, "limit": 10}))
                  for n in range(3)), reply("Thirty records listed."), reply("done")]

    async def one_run() -> tuple[dict, list]:
        agent = await new_agent(api, ["demo.list_records"])
        run_id = await queue_run(api, agent["id"], {"prompt": "List thirty records."})
        async with hostile_worker(pool, db_url, model):
            await until(db_url, *ended(run_id))
        return (await api.get(f"/v1/runs/{run_id}")).json(), await events(api, run_id)

    model.queue(*conversation())
    run, _ = await one_run()
    assert run["outcome"] == "done", why(run, model)
    sizes = [message_chars(r.body["messages"]) for r in model.requests]
    heaviest = sizes.index(max(sizes))
    assert heaviest == 3, sizes  # the fourth turn carries three results
    model.requests.clear()
    model.context_chars = sizes[3] - 1
    model.queue(*conversation())
    run, journal = await one_run()
    assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
    assert [r.status for r in model.requests] == [200, 200, 200, 400, 200, 200]
    assert len(of_type(journal, "context_masked")) == 1
    assert_every_history_well_formed(model)


async def test_a_429_then_success_streams_the_answer_and_counts_one_call(api, pool, db_url,
                                                                        model):
    model.queue(too_many_requests("0.2"), reply("Nothing to send today.", usage=(70, 9)),
                reply("done", usage=(30, 1)))
    agent = await new_agent(api, [SEND])
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model):
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    journal = await events(api, run_id)
    assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
    assert [r.status for r in model.requests] == [429, 200, 200]
    streamed = [p["text"] for p in of_type(journal, "content_delta") if p.get("streamed")]
    assert "".join(streamed) == "Nothing to send today."
    assert of_type(journal, "run_complete")[0]["answer"] == "Nothing to send today."
    await assert_usage_is_what_the_server_reported(api, run_id, model, journal)


async def test_a_server_that_keeps_failing_ends_the_run_with_one_sentence(api, pool, db_url,
                                                                         model):
    """With waiting out outages turned off (patience 0; tests/integration/test_model_outage.py
    has them waited out)."""
    model.queue(*[server_error() for _ in range(3)])
    agent = await new_agent(api, [SEND])
    run_id = await queue_run(api, agent["id"], {"prompt": "Anything to send?"})
    async with hostile_worker(pool, db_url, model, provider_patience_seconds=0):
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("failed", "failed")
    assert "failed after 3 attempt(s)" in run["reason"] and "500" in run["reason"]
    assert len(model.requests) == 3
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0


async def test_secrets_streamed_in_pieces_with_pauses_never_reach_the_journal(api, pool, db_url,
                                                                              model):
    """Issue 28, attack 3: a key block, a Bearer token, a password and an AWS session token
    written over many pieces, each followed by a pause longer than a batch (so the worker sends
    batches in between), over real HTTP. The journal (what SSE and the viewer replay) holds
    none of them in clear, and the text around them still streams."""
    import secrets as random_secrets

    def b64(n: int) -> str:
        return random_secrets.token_urlsafe(n).replace("-", "+").replace("_", "/")[:n]
    key_lines = ["b3BlbnNzaC1rZXktdjEAAAAA" + b64(46), b64(70), b64(70), b64(31) + "=="]
    bearer, password, session = b64(40), "Pw" + random_secrets.token_hex(6) + "!", b64(120)
    pieces = ["Here is the deploy config.\n-----BEGIN OPENSSH ", "PRIVATE KEY-----\n",
              key_lines[0][:30], key_lines[0][30:] + "\n", key_lines[1] + "\n", key_lines[2],
              "\n" + key_lines[3] + "\n-----END OPENSSH PRIVATE", " KEY-----\nAuthorization: ",
              "Bearer ", bearer[:20], bearer[20:] + "\npassword: ", password,
              "\naws_session_token = ", session[:60], session[60:], "\nThat is all. "]
    prose = ("The rollout starts on Monday with the staging cluster, then moves to the two "
             "production regions one at a time, each watched for an hour before the next. ")
    pieces += [prose, prose, prose, "Ask me if anything is unclear."]
    model.queue(reply(pieces=pieces, pause=0.3), reply("done"))
    agent = await new_agent(api, [SEND])
    run_id = await queue_run(api, agent["id"], {"prompt": "Show me the config."})
    async with hostile_worker(pool, db_url, model):
        await until(db_url, *ended(run_id))
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("completed", "done"), why(run, model)
    journal = await events(api, run_id)
    streamed = [p["text"] for p in of_type(journal, "content_delta") if p.get("streamed")]
    assert len(streamed) >= 2  # it did stream, batch by batch
    assert streamed[0].startswith("Here is the deploy config.")
    assert "".join(streamed).endswith("each watched for an hour before the next. Ask me if "
                                      "anything is unclear.")
    stored = scalar(db_url, "SELECT string_agg(payload::text, ' ') FROM run_events"
                            " WHERE execution_id = %s", (run_id,))
    parts = [line[:24] for line in key_lines] + [bearer[:12], bearer[20:32], password,
                                                 session[:24], session[60:84]]
    assert [part for part in parts if part in stored] == []
    shown = "".join(streamed)
    for marker in ("[REDACTED:private_key", "Authorization: Bearer [REDACTED:",
                   "password: [REDACTED:", "aws_session_token = [REDACTED:"):
        assert marker in shown, (marker, shown)
