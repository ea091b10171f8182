"""GET /v1/chats/{id}/events (RELIABILITY R16 for chats): one SSE stream of every run of a chat
in order, served by uvicorn, with a real worker. Resumed with Last-Event-ID mid-run (a run
waiting for an approval) and across runs, nothing is missing or doubled; answers stream as
content_delta; a stream left open follows the next message's run."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import httpx

from tests.factories import create_agent
from tests.integration.test_chats import new_chat, say
from tests.integration.test_honest_runs import done, suspended
from tests.integration.workers import running_worker, until
from tests.sse import frames

SEND = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                    "arguments": {"recipient": "ops", "text": "hi"}}]},
                   {"text": "Sent to ops."}]}


@asynccontextmanager
async def chat_stream(live_api, chat_id: str, last_event_id: str | None = None):
    headers = {"Authorization": f"Bearer {live_api['tokens']['acme']}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    async with httpx.AsyncClient(base_url=live_api["url"], timeout=60) as client:
        async with client.stream("GET", f"/v1/chats/{chat_id}/events",
                                 headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            yield frames(response)


async def read_until(stream, seen: list, stop) -> None:
    """Frames (not comments) into seen until stop(frame) holds for one."""
    async with asyncio.timeout(30):
        async for frame in stream:
            if frame.comment:
                continue
            seen.append(frame)
            if stop(frame):
                return


def is_end_of(run_id: str):
    return lambda frame: frame.event == "run_complete" and frame.json()["run_id"] == run_id


async def stored(api, chat_id: str, last_event_id: str | None = None) -> list[dict]:
    headers = {"Accept": "application/json"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    response = await api.get(f"/v1/chats/{chat_id}/events", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def test_the_chat_stream_resumes_mid_run_and_across_runs_with_nothing_missing_or_doubled(
        api, pool, db_url, live_api):
    agent = await create_agent(api, "sender", tools=["demo.send_message"])
    chat = await new_chat(api, agent["id"])
    seen: list = []
    async with running_worker(pool, db_url):
        # Open before any message: the stream waits for the chat's first run.
        async with chat_stream(live_api, chat["id"]) as stream:
            first = await say(api, chat["id"], "Tell ops hi", input=SEND)
            await read_until(stream, seen, lambda f: f.event == "approval_required")
        await until(db_url, *suspended(first["run_id"]))  # left mid-run, waiting for a person
        [approval] = (await api.get("/v1/approvals")).json()["items"]
        assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
        await until(db_url, *done(first["run_id"]))
        # Resumed mid-run: the rest of the first run, then the second run live.
        async with chat_stream(live_api, chat["id"], seen[-1].id) as stream:
            await read_until(stream, seen, is_end_of(first["run_id"]))
            second = await say(api, chat["id"], "Thanks", input={"script": [{"text": "Any time."}]})
            await read_until(stream, seen, lambda f: f.event == "content_delta"
                             and f.json()["run_id"] == second["run_id"])
        # Resumed again, between two events of the second run, and read to its end.
        async with chat_stream(live_api, chat["id"], seen[-1].id) as stream:
            await read_until(stream, seen, is_end_of(second["run_id"]))
        # Resumed at a run's last event: the stream goes on to the next message's run.
        async with chat_stream(live_api, chat["id"], seen[-1].id) as stream:
            third = await say(api, chat["id"], "Bye", input={"script": [{"text": "Bye."}]})
            await read_until(stream, seen, is_end_of(third["run_id"]))

    everything = await stored(api, chat["id"])
    assert [f.id for f in seen] == [e["id"] for e in everything]  # in order, none missing
    assert len({f.id for f in seen}) == len(seen)  # none twice
    runs = [f.json()["run_id"] for f in seen]
    order = [first["run_id"], second["run_id"], third["run_id"]]
    assert runs == sorted(runs, key=order.index) and set(runs) == set(order)
    for frame, event in zip(seen, everything):
        assert frame.id == f"{frame.json()['run_id']}:{frame.json()['seq']}"
        assert frame.event == event["type"] and frame.json()["payload"] == event["payload"]
    answers = [f.json()["payload"]["text"] for f in seen if f.event == "content_delta"]
    assert answers == ["Sent to ops.", "Any time.", "Bye."]
    # The JSON list resumes like the stream.
    assert await stored(api, chat["id"], seen[3].id) == everything[4:]


async def test_a_resume_point_outside_the_chat_or_another_tenants_chat_is_refused(api):
    agent = await create_agent(api, "talker")
    chat = await new_chat(api, agent["id"])
    other = await new_chat(api, agent["id"])
    posted = await say(api, other["id"], "Hi")
    for bad in ("12", "nope:1", f"{posted['run_id']}:x", f"{posted['run_id']}:0"):
        refused = await api.get(f"/v1/chats/{chat['id']}/events",
                                headers={"Last-Event-ID": bad})
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["error"] == "invalid_last_event_id"
    beyond = await api.get(f"/v1/chats/{other['id']}/events",
                           headers={"Last-Event-ID": f"{posted['run_id']}:5"})
    assert beyond.status_code == 422 and beyond.json()["error"] == "after_beyond_end"
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    assert (await api.get(f"/v1/chats/{chat['id']}/events", headers=globex)).status_code == 404


async def test_a_browser_follows_a_chat_with_a_single_use_ticket_for_that_chat_only(
        api, pool, db_url, live_api):
    agent = await create_agent(api, "talker")
    chat = await new_chat(api, agent["id"])
    other = await new_chat(api, agent["id"])
    posted = await say(api, chat["id"], "Hi", input={"script": [{"text": "Hello."}]})
    async with running_worker(pool, db_url):
        await until(db_url, *done(posted["run_id"]))

    async def ticket() -> str:
        made = await api.post(f"/v1/chats/{chat['id']}/stream-ticket")
        assert made.status_code == 201, made.text
        assert made.json()["expires_at"].endswith("Z")
        return made.json()["ticket"]

    mine = await ticket()
    seen: list = []
    async with httpx.AsyncClient(base_url=live_api["url"], timeout=30) as client:  # no token
        async with client.stream("GET", f"/v1/chats/{chat['id']}/events",
                                 params={"ticket": mine}) as response:
            assert response.status_code == 200
            await read_until(frames(response), seen, is_end_of(posted["run_id"]))
        again = await client.get(f"/v1/chats/{chat['id']}/events", params={"ticket": mine})
        assert again.status_code == 401  # single use
        elsewhere = await ticket()
        assert (await client.get(f"/v1/chats/{other['id']}/events",
                                 params={"ticket": elsewhere})).status_code == 401
        run_ticket = await ticket()
        assert (await client.get(f"/v1/runs/{posted['run_id']}/events",
                                 params={"ticket": run_ticket})).status_code == 401
    assert seen[-1].json()["payload"]["answer"] == "Hello."
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    assert (await api.post(f"/v1/chats/{chat['id']}/stream-ticket",
                           headers=globex)).status_code == 404
