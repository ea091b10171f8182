"""`tickwork tail`: the tree built from a journal (pure), the SSE parser, reconnects that never
repeat an event, and the command end to end against a real API served by uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import uuid

import httpx
import pytest
import uvicorn

from tickwork.scheduler.api.app import create_app, stop_hub
from tests.factories import queue_run, scripted_agent
from tests.integration.drivers import ROOT
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, until
from tickwork.run_tree import build_view, render, view_lines
from tickwork.sse_follow import Follower, SseEvent, SseParser, TailError, parse_sse

TICKWORK = [sys.executable, "-m", "tickwork.cli"]


def ev(seq, parent, kind, payload=None, ts="2026-01-01T00:00:00Z"):
    return {"seq": seq, "parent_seq": parent, "type": kind, "payload": payload or {}, "ts": ts}


JOURNAL = [
    ev(1, None, "run_start", {"attempt": 1}),
    ev(2, 1, "step_start", {"turn": 1}),
    ev(3, 2, "tool_start", {"tool": "demo.get_record", "call_id": "c1", "arguments": {"id": 1}},
       ts="2026-01-01T00:00:01.000Z"),
    ev(4, 3, "tool_complete", {"tool": "demo.get_record", "call_id": "c1", "ok": True,
                               "result_chars": 42}, ts="2026-01-01T00:00:01.250Z"),
    ev(5, 2, "budget_refusal", {"tool": "demo.get_record", "wall": "per_tool",
                                "message": "did NOT execute"}),
    ev(6, 2, "tool_start", {"tool": "demo.search_records", "call_id": "c2",
                            "arguments": {"query": "x"}}, ts="2026-01-01T00:00:02Z"),
    ev(7, 6, "tool_complete", {"tool": "demo.search_records", "call_id": "c2", "ok": False,
                               "result_chars": 9}, ts="2026-01-01T00:00:03.5Z"),
    ev(8, 1, "step_start", {"turn": 2}),
    ev(9, 8, "content_delta", {"text": "Record 1 is "}),
    ev(10, 8, "content_delta", {"text": "an invoice."}),
    ev(11, 8, "gate_decision", {"verdict": "stalled", "reason": "The judge said stalled: check 2",
                                "injected": "Continue: read record 2.", "units_left": 19}),
    ev(12, 1, "step_start", {"turn": 3}),
    ev(13, 12, "approval_required", {"approval_id": "run:c3", "tool": "demo.send_message",
                                     "call_id": "c3", "arguments": {"recipient": "a", "text": "b"}}),
]
RESUMED = [
    ev(14, 12, "tool_start", {"tool": "demo.send_message", "call_id": "c3", "approval_id": "run:c3",
                              "arguments": {"recipient": "a", "text": "b"}}),
    ev(15, 14, "tool_complete", {"tool": "demo.send_message", "call_id": "c3", "ok": True,
                                 "result_chars": 4}),
    ev(16, 1, "step_start", {"turn": 4}),
    ev(17, 16, "content_delta", {"text": "Sent."}),
    ev(18, 16, "gate_decision", {"verdict": "done", "reason": "The judge said done.",
                                 "injected": None, "units_left": 19}),
    ev(19, 1, "run_complete", {"status": "completed", "outcome": "done",
                               "reason": "The judge said done.", "answer": "Sent."}),
]


# --- the tree, pure --------------------------------------------------------------------------

def test_the_tree_is_rebuilt_from_parentage_with_marks_durations_and_the_waiting_approval():
    view = build_view("run-1", reversed(JOURNAL))  # order of arrival does not matter: seq does
    assert view_lines(view) == [
        "run run-1 · waiting for approval",
        "  step 1",
        '    ✓ demo.get_record({"id": 1})  250 ms, 42 chars',
        "    ✗ demo.get_record refused by the per_tool wall",
        '    ✗ demo.search_records({"query": "x"})  1.5 s, 9 chars',
        "  step 2",
        "    ↻ gate: stalled: The judge said stalled: check 2 (19 units left)",
        "      told the model: Continue: read record 2.",
        "  step 3",
        '    ⏸ waiting for approval: demo.send_message({"recipient": "a", "text": "b"}); '
        "`tickwork approve run:c3` or `tickwork reject run:c3`",
        "",
        "Record 1 is an invoice.",
    ]
    assert view.waiting_for == "run:c3" and view.outcome is None


def test_a_tool_stored_in_the_same_batch_as_its_start_shows_no_made_up_duration():
    same = [JOURNAL[0], JOURNAL[1], JOURNAL[2], {**JOURNAL[3], "ts": JOURNAL[2]["ts"]}]
    assert view_lines(build_view("r", same))[2] == '    ✓ demo.get_record({"id": 1})  42 chars'


def test_a_resumed_and_finished_run_shows_the_approval_decided_and_the_ending():
    view = build_view("run-1", JOURNAL + RESUMED)
    lines = view_lines(view)
    assert lines[0] == "run run-1 · done"
    assert '    ✓ approved: demo.send_message({"recipient": "a", "text": "b"})' in lines
    assert "    ✓ gate: done: The judge said done. (19 units left)" in lines
    assert lines[lines.index("") - 1] == "  ✓ done: The judge said done."
    assert view.answer == "Record 1 is an invoice.\n\nSent."
    assert view.outcome == "done" and view.waiting_for is None
    steps = [n for n in view.root.children if n.kind == "step"]
    assert [len(s.children) for s in steps] == [3, 1, 2, 1]
    assert [n.kind for n in steps[0].children] == ["tool", "refusal", "tool"]


def test_a_hard_stop_and_a_rejected_approval_are_failures_in_the_tree():
    journal = JOURNAL + [
        ev(14, 12, "budget_refusal", {"tool": "demo.send_message", "call_id": "c3",
                                      "wall": "approval_rejected", "message": "no"}),
        ev(15, 1, "content_delta", {"text": "I stopped after 100 calls.", "injected": True}),
        ev(16, 1, "gate_decision", {"verdict": "hard_stop", "reason": "hard cap reached"}),
        ev(17, 1, "run_complete", {"status": "completed", "outcome": "hard_stop",
                                   "reason": "hard cap reached", "answer": "x"}),
    ]
    lines = view_lines(build_view("r", journal))
    assert lines[0] == "run r · hard_stop"
    assert '    ✗ rejected: demo.send_message({"recipient": "a", "text": "b"})' in lines
    assert "    ✗ demo.send_message refused by the approval_rejected wall" in lines
    assert "  ✗ gate: hard_stop: hard cap reached" in lines
    assert "  ✗ hard_stop: hard cap reached" in lines
    assert lines[-1] == "I stopped after 100 calls."


def test_the_rich_tree_renders_and_a_live_view_keeps_only_the_latest_entries():
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(render(build_view("run-1", JOURNAL + RESUMED), max_children=2))
    text = console.export_text()
    assert "… 3 earlier entries" in text and "step 4" in text and "step 1" not in text
    assert "✓ done: The judge said done." in text and text.rstrip().endswith("Sent.")


# --- SSE parsing ------------------------------------------------------------------------------

def test_the_sse_parser_handles_fields_comments_multiline_data_and_every_line_end():
    stream = ("\ufeff: keepalive\r\n\r\nid: 1\r\nevent: run_start\r\ndata: {\"a\":\r\n"
              "data:1}\r\n\r\n: keepalive\n\nid: 2\revent: step_start\rdata: x\r\r"
              "data: no id change\nretry: 10\nbogus\n\n"
              "event: ignored without data\n\nid: 3\ndata: last\n\n" "id: 4\ndata: unterminated")
    whole = list(parse_sse([stream]))
    expected = [SseEvent("run_start", '{"a":\n1}', "1"), SseEvent("step_start", "x", "2"),
                SseEvent("message", "no id change", "2"), SseEvent("message", "last", "3")]
    assert whole == expected
    for size in (1, 2, 3, 7):  # the same events whatever the chunking (CR LF split included)
        assert list(parse_sse(stream[i:i + size] for i in range(0, len(stream), size))) == expected
    assert SseParser().feed("data: a\n\n") == [SseEvent("message", "a", None)]


# --- following: dedupe across reconnects, errors, giving up (mock transport) ---------------

def frames(*items: dict, keepalive: bool = False) -> bytes:
    text = ": keepalive\n\n" if keepalive else ""
    for item in items:
        text += f"id: {item['seq']}\nevent: {item['type']}\ndata: {json.dumps(item)}\n\n"
    return text.encode()


class Breaking(httpx.SyncByteStream):
    """A body that sends some bytes and then the connection breaks."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self):
        yield self.data
        raise httpx.ReadError("connection reset by peer")


def follower(handler, **kwargs) -> tuple[Follower, list[dict], list[float]]:
    seen, slept, now = [], [], [0.0]

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    http = httpx.Client(base_url="http://api.test", transport=httpx.MockTransport(handler))
    return Follower(http, "r1", seen.append, sleep=sleep, clock=lambda: now[0], **kwargs), seen, slept


def test_a_broken_stream_resumes_from_the_last_seq_and_repeats_nothing():
    journal = JOURNAL + RESUMED
    asked: list[tuple] = []

    def handler(request: httpx.Request) -> httpx.Response:
        resume = request.headers.get("last-event-id")
        asked.append((resume, request.url.params.get("after")))
        sse = {"content-type": "text/event-stream"}
        if resume is None:
            return httpx.Response(200, headers=sse, stream=Breaking(frames(*journal[:5])))
        if resume == "5" and len(asked) == 2:
            return httpx.Response(503, json={"message": "restarting"})
        if resume == "5":  # a server may replay a little too much: it must not show twice
            return httpx.Response(200, headers=sse, stream=Breaking(frames(*journal[3:12])))
        return httpx.Response(200, headers=sse, content=frames(*journal[10:], keepalive=True))

    follow, seen, slept = follower(handler)
    ending = follow.run()
    assert seen == journal
    assert (ending.status, ending.outcome) == ("completed", "done")
    assert asked == [(None, None), ("5", "5"), ("5", "5"), ("12", "12")]
    assert slept == [0.5, 1.0, 0.5]  # doubling while failing; reset once bytes flowed again


def test_a_stream_that_never_comes_back_gives_up_after_a_minute_with_a_clear_error():
    def handler(request: httpx.Request) -> httpx.Response:
        if "last-event-id" not in request.headers:
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=Breaking(frames(*JOURNAL[:2])))
        raise httpx.ConnectError("connection refused")

    follow, seen, slept = follower(handler)
    with pytest.raises(TailError, match="could not get it back for 60 s.*seq 2"):
        follow.run()
    assert seen == JOURNAL[:2]
    assert slept[:5] == [0.5, 1.0, 2.0, 4.0, 5.0] and set(slept[4:]) == {5.0}
    assert 60 <= sum(slept) <= 66


@pytest.mark.parametrize("status, message", [(401, "refused the token"), (404, "no run r1"),
                                             (422, "answered 422")])
def test_client_errors_end_the_tail_at_once(status, message):
    follow, _, slept = follower(lambda _: httpx.Response(status, json={"message": "nope"}))
    with pytest.raises(TailError, match=message):
        follow.run()
    assert slept == []


def test_a_stream_that_closes_early_on_an_ended_run_settles_from_the_stored_journal():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/runs/r1":
            return httpx.Response(200, json={"status": "cancelled", "outcome": "cancelled",
                                             "breadcrumb": None})
        if request.headers.get("accept") == "application/json":
            return httpx.Response(200, json={"items": []})
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")

    follow, seen, _ = follower(handler)
    assert follow.run().outcome == "cancelled" and seen == []


# --- end to end: the command against uvicorn, a worker in this process ---------------------

class QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # pytest owns the signals of this process
        yield


class LiveApi:
    """The real app under uvicorn in this process, on a port that survives restarts."""

    def __init__(self, pool, settings) -> None:
        self.pool, self.settings = pool, settings
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = self.server = self.task = None

    async def start(self) -> None:
        self.app = create_app(self.settings, pool=self.pool)
        # A short graceful timeout: open streams are cut (as a crash or a deploy would).
        self.server = QuietServer(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                 log_level="critical", lifespan="on",
                                                 timeout_graceful_shutdown=0.5))
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            assert not self.task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self.task is None:
            return
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 30)
        await stop_hub(self.app)
        self.task = None


@pytest.fixture
async def live(pool, settings):
    server = LiveApi(pool, settings)
    await server.start()
    yield server
    await server.stop()


async def tail(live: LiveApi, token: str, *args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "TICKWORK_API_URL": live.url, "TICKWORK_TOKEN": token, "COLUMNS": "200"}
    return await asyncio.create_subprocess_exec(
        *TICKWORK, "tail", *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)


async def finish(process: asyncio.subprocess.Process, timeout: float = 90) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode, out.decode(), err.decode()


SCRIPTED = {"script": [{"sleep": 1},
                       {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
                       {"text": "Done."}]}


async def test_tail_json_prints_exactly_the_stored_events_and_exits_0(api, pool, db_url, live):
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), SCRIPTED)
    process = await tail(live, api.tokens["acme"], run_id, "--json")
    async with running_worker(pool, db_url):
        code, out, err = await finish(process)
    stored = await events(api, run_id)
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == stored
    assert [e["type"] for e in stored][-1] == "run_complete"
    assert any(e["type"] == "tool_complete" for e in stored)


async def test_tail_draws_the_final_tree_once_when_piped(api, pool, db_url, live):
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), SCRIPTED)
    process = await tail(live, api.tokens["acme"], run_id)
    async with running_worker(pool, db_url):
        code, out, err = await finish(process)
    assert code == 0, err
    assert out.count(f"run {run_id} · done") == 1
    assert "step 1" in out and "✓ demo.get_record" in out and "✓ done" in out
    assert out.rstrip().endswith("Done.")


async def test_a_server_restart_mid_run_loses_and_repeats_nothing(api, pool, db_url, live):
    script = {"script": [{"sleep": 0.5},
                         {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]},
                         {"sleep": 2.5},
                         {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 2}}]},
                         {"sleep": 1}, {"text": "Done."}]}
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), script)
    process = await tail(live, api.tokens["acme"], run_id, "--json")
    before: list[dict] = []
    async with running_worker(pool, db_url):
        # Step 1 and the start of step 2 seen live (events are visible as they happen, so
        # step 2's start arrives while the model still thinks).
        while [e["type"] for e in before].count("step_start") < 2:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            assert line, (await process.stderr.read()).decode()
            before.append(json.loads(line))
        await live.stop()  # the API goes away with the stream open ...
        # ... stays away while the run goes on (journals what the tail has not seen) ...
        await until(db_url, "SELECT max(seq) > %s FROM run_events WHERE execution_id = %s",
                    (before[-1]["seq"], run_id))
        await live.start()  # ... and comes back on the same port
        code, out, err = await finish(process)
    after = [json.loads(line) for line in out.splitlines()]
    stored = await events(api, run_id)
    assert code == 0, err
    assert before + after == stored  # every event, once, in order
    assert after and len(before) >= 4
    assert f"reconnecting from seq {before[-1]['seq']}" in err  # it did lose the stream


async def test_a_hard_stopped_run_exits_1(api, pool, db_url, live):
    loop = {"script": [{"repeat": {"tool": "demo.get_record", "times": 500, "vary": "id"}}]}
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), loop)
    process = await tail(live, api.tokens["acme"], run_id)
    async with running_worker(pool, db_url):
        code, out, err = await finish(process)
    assert code == 1, err
    assert f"run {run_id} · hard_stop" in out
    assert "✗ demo.get_record refused by the per_tool wall" in out
    assert "✗ hard_stop: hard cap of 100 external tool calls reached" in out


async def test_a_stalled_out_run_exits_1_in_json_mode_too(api, pool, db_url, live):
    script = {"script": [{"text": "Working on it."}], "judge": ["stalled"]}
    run_id = await queue_run(api, await scripted_agent(api, []), script)
    process = await tail(live, api.tokens["acme"], run_id, "--json")
    async with running_worker(pool, db_url):
        code, out, err = await finish(process)
    assert code == 1, err
    last = json.loads(out.splitlines()[-1])
    assert last["type"] == "run_complete" and last["payload"]["outcome"] == "stalled_out"


async def test_an_unknown_run_a_bad_token_and_no_api_are_clear_errors(api, live):
    code, out, err = await finish(await tail(live, api.tokens["acme"], str(uuid.uuid4())))
    assert code == 1 and out == ""
    assert "no run" in err and "tickwork runs" in err
    code, _, err = await finish(await tail(live, "tw_not_a_real_token", str(uuid.uuid4())))
    assert code == 1 and "refused the token" in err
    code, _, err = await finish(await tail(live, api.tokens["acme"], "not-a-uuid"))
    assert code == 1 and "error:" in err and "Traceback" not in err
    await live.stop()
    code, _, err = await finish(await tail(live, api.tokens["acme"], str(uuid.uuid4())))
    assert code == 1 and "cannot reach the tickwork API" in err
