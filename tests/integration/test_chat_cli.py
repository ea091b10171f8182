"""`tickwork chat AGENT -m TEXT [--chat ID] [--json]` and `tickwork chats [--json]` as real
processes against the API served by uvicorn, with a worker in this process."""

from __future__ import annotations

import json

from tests.factories import scripted_agent
from tests.integration.test_cli_tail import live  # noqa: F401  (fixture)
from tests.integration.test_run_control_cli import cli
from tests.integration.workers import running_worker


async def test_chat_prints_the_answer_and_continues_a_chat_and_chats_lists_it(api, pool, db_url,
                                                                             live):
    token = api.tokens["acme"]
    await scripted_agent(api, name="helper")
    async with running_worker(pool, db_url):
        code, out, err = await cli(live, token, "chat", "helper", "-m", "Hello", "--json")
        assert code == 0, err
        said = json.loads(out)  # one document on stdout
        run = (await api.get(f"/v1/runs/{said['run_id']}")).json()
        assert (said["status"], said["outcome"], said["answer"]) == (
            "completed", "done", run["answer"])
        assert run["answer"] and run["trigger_type"] == "chat"
        assert run["input"]["message"] == "Hello"

        code, out, err = await cli(live, token, "chat", "helper", "--chat", said["chat_id"],
                                   "-m", "Again")
        assert code == 0, err
        assert out.strip() == run["answer"]  # the same scripted answer, streamed
        assert said["chat_id"] in err  # how to continue
    shown = (await api.get(f"/v1/chats/{said['chat_id']}")).json()
    assert [(m["role"], m["text"]) for m in shown["messages"]] == [
        ("user", "Hello"), ("agent", run["answer"]), ("user", "Again"), ("agent", run["answer"])]

    code, out, err = await cli(live, token, "chats", "--json")
    assert code == 0, err
    [listed] = json.loads(out)["items"]
    assert (listed["id"], listed["message_count"], listed["status"]) == (said["chat_id"], 2,
                                                                        "idle")
    code, out, err = await cli(live, token, "chats")
    assert code == 0 and said["chat_id"] in out and "helper" in out


async def test_chat_refuses_an_empty_message_and_a_busy_chat_with_a_sentence(api, live, db_url):
    token = api.tokens["acme"]
    await scripted_agent(api, name="helper")
    code, out, err = await cli(live, token, "chat", "helper", "-m", "  ")
    assert code == 1 and "--message must not be empty" in err and out == ""
    chat = (await api.get("/v1/agents")).json()["items"][0]
    created = (await api.post(f"/v1/agents/{chat['id']}/chats", json={})).json()
    first = (await api.post(f"/v1/chats/{created['id']}/messages", json={"text": "x"})).json()
    code, out, err = await cli(live, token, "chat", "helper", "--chat", created["id"], "-m", "y")
    assert code == 1 and first["run_id"] in err and "Traceback" not in err
