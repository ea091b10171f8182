"""The live journal tail over a real HTTP server: resume at every position, many subscribers,
framing that cannot be forged, keepalives, tickets, and a lost LISTEN connection."""

from __future__ import annotations

import asyncio

import httpx
import psycopg

from tests.factories import queue_run, scripted_agent
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, until
from tests.sse import frames

LIVE_SCRIPT = {"script": [{"sleep": 0.3},
                          {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
                          {"sleep": 0.3},
                          {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 2}}]},
                          {"sleep": 0.3}, {"text": "Two records read."}]}


def client(live, token="acme") -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=live["url"], timeout=30,
                             headers={"Authorization": f"Bearer {live['tokens'][token]}"})


async def read_all(http: httpx.AsyncClient, run_id: str, *, last: str | None = None,
                   take: int | None = None) -> list[dict]:
    """Read events (optionally only `take` of them, then hang up)."""
    headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last else {})}
    got: list[dict] = []
    async with http.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for frame in frames(response):
            if frame.comment:
                continue
            event = frame.json()
            assert frame.id == str(event["seq"]) and frame.event == event["type"]
            got.append(event)
            if take is not None and len(got) == take:
                break
    return got


async def test_a_tail_that_hangs_up_after_every_event_and_resumes_misses_nothing(api, pool, db_url, live_api):
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), LIVE_SCRIPT)
    received: list[dict] = []
    async with running_worker(pool, db_url), client(live_api) as http:
        while not received or received[-1]["type"] != "run_complete":
            last = str(received[-1]["seq"]) if received else None
            received += await read_all(http, run_id, last=last, take=1)  # k = every position
    stored = await events(api, run_id)
    assert [e["seq"] for e in received] == [e["seq"] for e in stored]
    assert received == stored
    assert len(received) >= 10


async def test_two_hundred_subscribers_on_one_process_all_receive_every_event(api, pool, db_url, live_api):
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), LIVE_SCRIPT)
    async with client(live_api) as http:
        tails = [asyncio.create_task(read_all(http, run_id)) for _ in range(200)]
        await asyncio.sleep(0)  # let them connect before the run starts
        async with running_worker(pool, db_url):
            results = await asyncio.wait_for(asyncio.gather(*tails), 120)
    stored = await events(api, run_id)
    assert all(result == stored for result in results)


async def test_hostile_text_in_an_event_arrives_as_exactly_one_event(api, pool, db_url, live_api):
    # (NUL and lone surrogates cannot enter through the API; the journal's own handling of
    # them is unit-tested in test_redact.py.)
    hostile = "a\n\ndata: x\n\nevent: run_complete\nid: 999\r\nb\u2028c: d"
    run_id = await queue_run(api, await scripted_agent(api, []), {"script": [{"text": hostile}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s", (run_id,))
    async with client(live_api) as http:
        got = await read_all(http, run_id)
    texts = [e["payload"]["text"] for e in got if e["type"] == "content_delta"]
    assert texts == [hostile]
    assert [e["type"] for e in got].count("run_complete") == 1
    assert got == await events(api, run_id)


async def test_a_waiting_run_gets_keepalives_that_use_no_sequence_number(api, pool, db_url, live_api, settings):
    settings.sse_keepalive_seconds = 0.3
    agent = await api.post("/v1/agents", json={"name": "s", "tools": ["demo.send_message"]})
    run_id = await queue_run(api, agent.json()["id"], {"script": [{"tool_calls": [
        {"name": "demo.send_message", "arguments": {"recipient": "a", "text": "b"}}]}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT breadcrumb = 'suspended' FROM executions WHERE id = %s", (run_id,))
    seen, comments = [], 0
    async with client(live_api) as http:
        async with http.stream("GET", f"/v1/runs/{run_id}/events",
                               headers={"Accept": "text/event-stream"}) as response:
            async for frame in frames(response):
                if frame.comment:
                    comments += 1
                    if comments == 3:
                        break
                else:
                    seen.append(frame.json())
    assert seen[-1]["type"] == "approval_required"  # open, waiting, not closed
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))


async def test_bad_resume_points_and_other_tenants_are_refused_clearly(api, pool, db_url, live_api):
    run_id = await queue_run(api, await scripted_agent(api, []), {"script": [{"text": "ok"}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s", (run_id,))
    async with client(live_api) as http:
        for bad in ("abc", "-1", str(2**64), "1.5"):
            response = await http.get(f"/v1/runs/{run_id}/events", headers={
                "Accept": "text/event-stream", "Last-Event-ID": bad})
            assert response.status_code == 422 and response.json()["error"] == "invalid_last_event_id"
        beyond = await http.get(f"/v1/runs/{run_id}/events", params={"after": 999},
                                headers={"Accept": "text/event-stream"})
        assert beyond.status_code == 422 and beyond.json()["error"] == "after_beyond_end"
    async with client(live_api, "globex") as other:
        response = await other.get(f"/v1/runs/{run_id}/events", headers={"Accept": "text/event-stream"})
        assert response.status_code == 404
        ticket = await other.post(f"/v1/runs/{run_id}/stream-ticket")
        assert ticket.status_code == 404


async def test_a_stream_ticket_lets_a_header_less_client_tail_one_run_only(api, pool, db_url, live_api):
    agent_id = await scripted_agent(api, [])
    run_id = await queue_run(api, agent_id, {"script": [{"text": "ok"}]})
    other_run = await queue_run(api, agent_id, {"script": [{"text": "other"}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT count(*) = 2 FROM executions WHERE status = 'completed'")
    async with client(live_api) as http:
        ticket = (await http.post(f"/v1/runs/{run_id}/stream-ticket")).json()["ticket"]
    async with httpx.AsyncClient(base_url=live_api["url"], timeout=30) as bare:
        got = []
        async with bare.stream("GET", f"/v1/runs/{run_id}/events", params={"ticket": ticket}) as r:
            assert r.status_code == 200
            got = [f.json() for f in [f async for f in frames(r)] if not f.comment]
        assert got[-1]["type"] == "run_complete"
        wrong = await bare.get(f"/v1/runs/{other_run}/events", params={"ticket": ticket})
        assert wrong.status_code == 401
        token_in_url = await bare.get(f"/v1/runs/{run_id}/events",
                                      params={"token": live_api["tokens"]["acme"]})
        assert token_in_url.status_code == 401


async def test_a_lost_listen_connection_is_replaced_and_nothing_is_skipped(api, pool, db_url, live_api):
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), LIVE_SCRIPT)
    async with client(live_api) as http:
        tail = asyncio.create_task(read_all(http, run_id))
        # Both apps' hubs listen from startup: the in-process client's and the served one's.
        # Only this test's database: another tickwork on the same server has listeners too.
        await until(db_url, "SELECT count(*) = 2 FROM pg_stat_activity"
                            " WHERE datname = current_database()"
                            " AND application_name = 'tickwork-api-listen'")
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE datname = current_database()"
                         " AND application_name = 'tickwork-api-listen'")
        async with running_worker(pool, db_url):
            got = await asyncio.wait_for(tail, 60)
    assert got == await events(api, run_id)


async def test_a_poll_and_a_notification_refreshing_together_never_duplicate_events(api, pool, db_url):
    from uuid import UUID

    from tickwork.scheduler.api.hub import EventHub

    run_id = await queue_run(api, await scripted_agent(api, []), {"script": [{"text": "ok"}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s", (run_id,))
    hub = EventHub(pool, db_url)
    async with hub.subscribe(UUID(run_id), 0) as feed:
        await asyncio.gather(*[hub.refresh(UUID(run_id), notified=i % 2 == 0) for i in range(8)])
        seqs = [e["seq"] for e in feed.events]
    assert seqs == list(range(1, len(await events(api, run_id)) + 1))
