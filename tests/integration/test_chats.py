"""Chats (DESIGN, third round): a durable thread per agent whose every message starts one run
with trigger_type chat down the same path as every run; chat_busy while that run is unfinished
(race-free), Idempotency-Key on messages, and tenant isolation. Real Postgres, the API
in-process and, for concurrent requests, served by uvicorn."""

from __future__ import annotations

import asyncio

import httpx
import psycopg

from tests.factories import create_agent, scripted_agent
from tests.hostile_model import HostileModel, reply
from tests.integration.test_honest_runs import done, suspended
from tests.integration.test_hostile_model import hostile_worker
from tests.integration.workers import running_worker, scalar, until


async def new_chat(api, agent_id: str, **body) -> dict:
    response = await api.post(f"/v1/agents/{agent_id}/chats", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def say(api, chat_id: str, text: str, *, key: str | None = None, **body) -> dict:
    headers = {"Idempotency-Key": key} if key else None
    response = await api.post(f"/v1/chats/{chat_id}/messages", json={"text": text, **body},
                              headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


def scripted(text: str) -> dict:
    return {"input": {"script": [{"text": text}]}}


async def test_a_chat_is_created_listed_and_shown_and_a_message_starts_a_chat_run(api, db_url):
    agent_id = await scripted_agent(api)
    other = await scripted_agent(api, name="other")
    chat = await new_chat(api, agent_id, title="Invoices")
    assert {"id", "agent_id", "status", "created_at"} <= set(chat)
    assert (chat["agent_id"], chat["status"], chat["title"]) == (agent_id, "idle", "Invoices")
    await new_chat(api, other)

    listed = (await api.get("/v1/chats", params={"agent_id": agent_id})).json()
    assert [c["id"] for c in listed["items"]] == [chat["id"]] and listed["next_cursor"] is None
    first = (await api.get("/v1/chats", params={"limit": 1})).json()
    second = (await api.get("/v1/chats", params={"limit": 1,
                                                 "cursor": first["next_cursor"]})).json()
    assert len({first["items"][0]["id"], second["items"][0]["id"]}) == 2

    posted = await say(api, chat["id"], "What is record 1?")
    assert set(posted) == {"message_id", "run_id"}
    run = (await api.get(f"/v1/runs/{posted['run_id']}")).json()
    assert (run["trigger_type"], run["status"], run["agent_id"]) == ("chat", "queued", agent_id)
    assert run["input"] == {"message": "What is record 1?", "chat_id": chat["id"]}
    # The same path as every run: the execution and its queue task, in one statement.
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks WHERE execution_id = %s",
                  (posted["run_id"],)) == 1
    shown = (await api.get(f"/v1/chats/{chat['id']}")).json()
    assert shown["status"] == "busy" and shown["run_id"] == posted["run_id"]
    [message] = shown["messages"]
    assert (message["role"], message["text"], message["run_id"]) == (
        "user", "What is record 1?", posted["run_id"])
    assert message["created_at"].endswith("Z")


async def test_the_answer_becomes_the_agents_message_and_the_chat_is_idle_again(api, pool,
                                                                                db_url):
    chat = await new_chat(api, await scripted_agent(api))
    posted = await say(api, chat["id"], "What is record 1?", **scripted("An invoice."))
    async with running_worker(pool, db_url):
        await until(db_url, *done(posted["run_id"]))
    shown = (await api.get(f"/v1/chats/{chat['id']}")).json()
    assert shown["status"] == "idle"
    assert [(m["role"], m["text"], m["run_id"]) for m in shown["messages"]] == [
        ("user", "What is record 1?", posted["run_id"]),
        ("agent", "An invoice.", posted["run_id"])]


async def test_a_message_while_the_chats_run_is_unfinished_is_chat_busy_naming_it(api, pool,
                                                                                   db_url):
    chat = await new_chat(api, await scripted_agent(api))
    first = await say(api, chat["id"], "One", **scripted("Done one."))
    busy = await api.post(f"/v1/chats/{chat['id']}/messages", json={"text": "Two"})
    assert busy.status_code == 409, busy.text
    assert busy.json()["error"] == "chat_busy" and busy.json()["run_id"] == first["run_id"]
    assert first["run_id"] in busy.json()["message"]
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1  # nothing queued
    async with running_worker(pool, db_url):
        await until(db_url, *done(first["run_id"]))
    second = await say(api, chat["id"], "Two", **scripted("Done two."))
    assert second["run_id"] != first["run_id"]


async def test_a_chat_whose_run_waits_for_an_approval_is_busy_until_it_is_decided(api, pool,
                                                                                  db_url):
    agent = await create_agent(api, "sender", tools=["demo.send_message"])
    chat = await new_chat(api, agent["id"])
    script = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                          "arguments": {"recipient": "ops", "text": "hi"}}]},
                         {"text": "Sent."}]}
    posted = await say(api, chat["id"], "Tell ops hi", input=script)
    async with running_worker(pool, db_url):
        await until(db_url, *suspended(posted["run_id"]))
        assert (await api.get(f"/v1/chats/{chat['id']}")).json()["status"] == "waiting"
        busy = await api.post(f"/v1/chats/{chat['id']}/messages", json={"text": "And sales?"})
        assert busy.status_code == 409 and busy.json()["run_id"] == posted["run_id"]
        [approval] = (await api.get("/v1/approvals")).json()["items"]
        assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
        await until(db_url, *done(posted["run_id"]))
    await say(api, chat["id"], "And sales?", **scripted("No."))


async def test_two_concurrent_messages_start_exactly_one_run(api, live_api, db_url):
    chat = await new_chat(api, await scripted_agent(api))
    headers = {"Authorization": f"Bearer {live_api['tokens']['acme']}"}
    for round_ in range(3):  # several rounds: the race must never let two through
        async with httpx.AsyncClient(base_url=live_api["url"], headers=headers,
                                     timeout=30) as client:
            answers = await asyncio.gather(*(
                client.post(f"/v1/chats/{chat['id']}/messages", json={"text": f"m{round_}.{i}"})
                for i in range(8)))
        codes = sorted(a.status_code for a in answers)
        assert codes == [202] + [409] * 7, [a.text for a in answers]
        [winner] = [a.json()["run_id"] for a in answers if a.status_code == 202]
        assert {a.json()["run_id"] for a in answers if a.status_code == 409} == {winner}
        with psycopg.connect(db_url, autocommit=True) as conn:  # let the next round in
            conn.execute("UPDATE executions SET status = 'cancelled', outcome = 'cancelled',"
                         " finished_at = now() WHERE id = %s", (winner,))
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE trigger_type = 'chat'") == 3
    assert scalar(db_url, "SELECT count(*) FROM chat_messages") == 3


async def test_a_message_honours_its_idempotency_key(api, db_url):
    chat = await new_chat(api, await scripted_agent(api))
    first = await say(api, chat["id"], "Once", key="k-1")
    again = await say(api, chat["id"], "Once", key="k-1")  # even while its run is unfinished
    assert again == first
    changed = await api.post(f"/v1/chats/{chat['id']}/messages", json={"text": "Twice"},
                             headers={"Idempotency-Key": "k-1"})
    assert changed.status_code == 422 and changed.json()["error"] == "idempotency_key_reused"
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1
    assert scalar(db_url, "SELECT count(*) FROM chat_messages") == 1


async def test_bad_messages_are_refused_with_a_sentence_and_change_nothing(api, db_url):
    agent_id = await scripted_agent(api)
    chat = await new_chat(api, agent_id)
    for body in ({"text": ""}, {"text": "   "}, {}, {"text": 5}, {"text": "x", "extra": 1},
                 {"text": "x", "input": {"message": "y"}}, {"text": "x", "input": {"chat_id": "c"}}):
        refused = await api.post(f"/v1/chats/{chat['id']}/messages", json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["message"]
    missing = await api.post("/v1/chats/00000000-0000-7000-8000-000000000000/messages",
                             json={"text": "x"})
    assert missing.status_code == 404 and "chat" in missing.json()["message"]
    nobody = await api.post("/v1/agents/00000000-0000-7000-8000-000000000000/chats", json={})
    assert nobody.status_code == 404
    await api.put(f"/v1/agents/{agent_id}", json={"name": "worker-agent", "status": "paused"})
    paused = await api.post(f"/v1/chats/{chat['id']}/messages", json={"text": "x"})
    assert paused.status_code == 409 and paused.json()["error"] == "agent_paused"
    assert scalar(db_url, "SELECT count(*) FROM executions") == 0
    assert scalar(db_url, "SELECT count(*) FROM chat_messages") == 0


async def test_another_tenants_chat_is_not_found(api):
    chat = await new_chat(api, await scripted_agent(api))
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    assert (await api.get(f"/v1/chats/{chat['id']}", headers=globex)).status_code == 404
    assert (await api.get("/v1/chats", headers=globex)).json()["items"] == []
    posted = await api.post(f"/v1/chats/{chat['id']}/messages", json={"text": "x"},
                            headers=globex)
    assert posted.status_code == 404
    agent = await api.get("/v1/agents")
    agent_id = agent.json()["items"][0]["id"]
    assert (await api.post(f"/v1/agents/{agent_id}/chats", json={},
                           headers=globex)).status_code == 404


async def test_the_second_model_call_carries_the_first_exchange_streamed(api, pool, db_url):
    agent = await create_agent(api, "talker", tools=[], instructions="Be brief.")
    chat = await new_chat(api, agent["id"])
    with HostileModel() as model:
        model.queue(reply("Ops gets it."), reply("done"), reply("Sales too."), reply("done"))
        async with hostile_worker(pool, db_url, model):
            first = await say(api, chat["id"], "Which team gets the summary?")
            await until(db_url, *done(first["run_id"]))
            second = await say(api, chat["id"], "And sales?")
            await until(db_url, *done(second["run_id"]))
    agent_calls = [r for r in model.accepted() if r.body.get("model") == "hostile-agent"]
    assert all(r.body.get("stream") for r in agent_calls)
    sent = [{k: m[k] for k in ("role", "content")} for m in agent_calls[-1].body["messages"]]
    assert sent[0]["role"] == "system" and "Be brief." in sent[0]["content"]
    assert sent[1:] == [{"role": "user", "content": "Which team gets the summary?"},
                        {"role": "assistant", "content": "Ops gets it."},
                        {"role": "user", "content": "And sales?"}]
    shown = (await api.get(f"/v1/chats/{chat['id']}")).json()
    assert [(m["role"], m["text"]) for m in shown["messages"]] == [
        ("user", "Which team gets the summary?"), ("agent", "Ops gets it."),
        ("user", "And sales?"), ("agent", "Sales too.")]


async def test_a_chat_run_whose_worker_died_is_retried_with_the_whole_conversation(api, pool,
                                                                                    db_url):
    """R16: the worker of the second message's run dies after starting it; the sweep retries
    it. The chat stays busy (naming the retry), the retry's model sees the first exchange, its
    answer is the agent's message, and the chat's events hold both attempts once each."""
    from datetime import datetime, timedelta, timezone

    from tickwork.scheduler.sweep import sweep_stale
    from tickwork.worker.claim import claim_queued_runs

    agent = await create_agent(api, "talker", tools=[], instructions="Be brief.")
    chat = await new_chat(api, agent["id"])
    with HostileModel() as model:
        model.queue(reply("Ops gets it."), reply("done"), reply("Sales too."), reply("done"))
        async with hostile_worker(pool, db_url, model):
            first = await say(api, chat["id"], "Which team gets the summary?")
            await until(db_url, *done(first["run_id"]))
        second = await say(api, chat["id"], "And sales?")
        [claimed] = await claim_queued_runs(pool, limit=1, worker_id="died")  # then it died
        assert str(claimed.id) == second["run_id"]
        swept = await sweep_stale(pool, now=datetime.now(timezone.utc) + timedelta(minutes=30),
                                  batch_size=10)
        assert (swept.failed, swept.retried) == (1, 1)
        retry = scalar(db_url, "SELECT id::text FROM executions WHERE retry_of = %s",
                       (second["run_id"],))
        busy = await api.post(f"/v1/chats/{chat['id']}/messages", json={"text": "Thanks"})
        assert busy.status_code == 409 and busy.json()["run_id"] == retry
        async with hostile_worker(pool, db_url, model):
            await until(db_url, *done(retry))
    last = [r for r in model.accepted() if r.body.get("model") == "hostile-agent"][-1]
    assert [(m["role"], m["content"]) for m in last.body["messages"][1:]] == [
        ("user", "Which team gets the summary?"), ("assistant", "Ops gets it."),
        ("user", "And sales?")]
    shown = (await api.get(f"/v1/chats/{chat['id']}")).json()
    assert [(m["role"], m["text"], m["run_id"]) for m in shown["messages"]] == [
        ("user", "Which team gets the summary?", first["run_id"]),
        ("agent", "Ops gets it.", first["run_id"]),
        ("user", "And sales?", second["run_id"]), ("agent", "Sales too.", retry)]
    listed = (await api.get(f"/v1/chats/{chat['id']}/events",
                            headers={"Accept": "application/json"})).json()["items"]
    runs = [e["run_id"] for e in listed]
    assert runs == sorted(runs, key=[first["run_id"], second["run_id"], retry].index)
    assert set(runs) == {first["run_id"], second["run_id"], retry}
    assert len({e["id"] for e in listed}) == len(listed)
    assert scalar(db_url, "SELECT count(*) FROM chat_messages") == 2
    await say(api, chat["id"], "Thanks")  # idle again


async def test_a_chat_of_fifty_messages_gives_each_one_run_and_the_model_the_whole_thread(
        api, pool, db_url):
    """R16: every message gets exactly one run, and the last model call carries all 49
    exchanges before it, in order."""
    agent = await create_agent(api, "long", tools=[], instructions="Count with me.")
    chat = await new_chat(api, agent["id"])
    with HostileModel() as model:
        for n in range(1, 51):
            model.queue(reply(f"answer {n}"), reply("done"))
        async with hostile_worker(pool, db_url, model):
            for n in range(1, 51):
                posted = await say(api, chat["id"], f"message {n}")
                await until(db_url, *done(posted["run_id"]))
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE trigger_type = 'chat'") == 50
    assert scalar(db_url, "SELECT count(DISTINCT run_id) FROM chat_messages") == 50
    last = [r for r in model.accepted() if r.body.get("model") == "hostile-agent"][-1]
    thread = [(m["role"], m["content"]) for m in last.body["messages"][1:]]
    expected = [turn for n in range(1, 50)
                for turn in (("user", f"message {n}"), ("assistant", f"answer {n}"))]
    assert thread == expected + [("user", "message 50")]
    shown = (await api.get(f"/v1/chats/{chat['id']}")).json()
    assert len(shown["messages"]) == 100 and shown["messages"][-1]["text"] == "answer 50"
