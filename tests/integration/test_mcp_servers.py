"""MCP servers as vendors (DESIGN "Tools the user brings", RELIABILITY S8): real servers
written with the official SDK (tests/mcp_servers/), started as processes over stdio or served
over streamable HTTP on a loopback port, called by scripted runs of an in-process worker
through the same path as every vendor tool (walls, approvals, journal, stored results,
offload, the tool timeout). A server that hangs, crashes, lies about its tools, answers with a
huge result or cannot start costs only its own tools."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.factories import queue_run
from tests.integration.test_honest_runs import done, of_type, suspended
from tests.integration.test_run_loop_promises import Recording, agent, worker
from tests.integration.test_worker_runs import events
from tests.integration.workers import until
from tickwork.sql.sealed import new_key
from tickwork.worker.tools.mcp_config import parse_tools
from tickwork.worker.tools.mcp_vendor import MAX_RESULT_CHARS, McpServers
from tickwork.worker.tools.publish import publish_catalog

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"


def stdio(name: str, script: str, **fields) -> dict:
    return {"name": name, "command": [sys.executable, str(SERVERS / script)], **fields}


@asynccontextmanager
async def mcp(db_url: str, *entries: dict):
    """The servers started as a worker starts them, their tools published to the catalog."""
    servers = await McpServers.start(parse_tools({"mcp": list(entries)}))
    try:
        await asyncio.to_thread(publish_catalog, db_url, servers.specs)
        yield servers
    finally:
        await servers.aclose()


async def run_with(api, pool, db_url, servers, tools, script, *, auto_approve=(),
                   until_state=done, **settings):
    agent_id = await agent(api, tools, auto_approve, name=f"mcp-{os.urandom(4).hex()}")
    run_id = await queue_run(api, agent_id, {"script": script})
    provider = Recording()
    async with worker(pool, db_url, provider=provider, extra=servers.specs, **settings):
        await until(db_url, *until_state(run_id))
    return run_id, (await api.get(f"/v1/runs/{run_id}")).json(), provider


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def tool_results(provider: Recording) -> list[str]:
    """What the model was told for each call, in order (from its last request); a result
    is rendered as JSON, as every tool's is."""
    last = [messages for alias, messages in provider.sent if alias == "default"][-1]
    return [json.loads(m.content) for m in last if m.role == "tool"]


# --- a server that works, over stdio ----------------------------------------------------------

async def test_a_stdio_servers_tools_publish_as_name_tool_and_a_classified_read_runs_unasked(
        api, pool, db_url):
    async with mcp(db_url, stdio("good", "good.py", classes={"echo": "read"},
                                 tools=["echo", "add", "oops"])) as servers:
        assert sorted(s.key for s in servers.specs) == ["good.add", "good.echo", "good.oops"]
        listed = (await api.get("/v1/tools")).json()["items"]
        echo = next(t for t in listed if t["key"] == "good.echo")
        assert echo["tool_class"] == "read"
        assert echo["parameters"]["required"] == ["text"]  # the schema the server gave
        # Off the allowlist, a tool the server lists is no tool at all: no agent may have it.
        outside = await api.post("/v1/agents", json={"name": "wiper", "tools": ["good.wipe"]})
        assert outside.status_code == 400 and outside.json()["unknown"] == ["good.wipe"]
        run_id, run, provider = await run_with(
            api, pool, db_url, servers, ["good.echo", "good.oops"],
            [{"tool_calls": [call("good.echo", text="hello from mcp")]},
             {"tool_calls": [call("good.echo", words="no such argument")]},
             {"tool_calls": [call("good.oops")]}, {"text": "Done."}],
            auto_approve=["good.oops"])
    assert run["outcome"] == "done", run
    said, misfit, failed = tool_results(provider)
    assert said == "hello from mcp"
    assert "did NOT execute" in misfit["error"] and "text" in misfit["error"]  # its schema
    assert "the ledger is locked" in failed["error"]  # isError: a failed call
    completes = of_type(await events(api, run_id), "tool_complete")
    assert [(c["tool"], c["ok"]) for c in completes] == [
        ("good.echo", True), ("good.echo", False), ("good.oops", False)]


async def test_a_tool_without_a_class_waits_for_approval_whatever_its_annotations_say(
        api, pool, db_url):
    async with mcp(db_url, stdio("good", "good.py")) as servers:
        specs = {s.key: s for s in servers.specs}
        # add says it is read only, wipe that it is destructive: neither is believed to be read.
        assert (specs["good.add"].tool_class, specs["good.wipe"].tool_class) == ("write",
                                                                                 "delete")
        run_id, run, _ = await run_with(api, pool, db_url, servers, ["good.add"],
                                        [{"tool_calls": [call("good.add", a=2, b=3)]},
                                         {"text": "Five."}], until_state=suspended)
    journal = await events(api, run_id)
    assert [a["tool"] for a in of_type(journal, "approval_required")] == ["good.add"]
    assert not of_type(journal, "tool_complete")


# --- a server over streamable HTTP, with a tenant's secret in its headers ---------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server():
    port = free_port()
    token = "tok-" + os.urandom(6).hex()
    process = subprocess.Popen([sys.executable, str(SERVERS / "good.py"), "--http", str(port)],
                               env={**os.environ, "GOOD_MCP_TOKEN": token},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # until it listens (its start-up, not a timing assertion)
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                raise RuntimeError("the HTTP MCP server exited at start")
            subprocess.run(["sleep", "0.05"])
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        process.terminate()
        process.wait(10)


async def test_an_http_server_is_called_over_streamable_http(api, pool, db_url, http_server):
    url, _ = http_server
    async with mcp(db_url, {"name": "web", "url": url, "classes": {"add": "read"}}) as servers:
        assert "web.add" in {s.key for s in servers.specs}
        _, run, provider = await run_with(api, pool, db_url, servers, ["web.add"],
                                          [{"tool_calls": [call("web.add", a=40, b=2)]},
                                           {"text": "42."}])
    assert run["outcome"] == "done" and tool_results(provider) == ["42"]


async def test_a_secret_header_is_the_calling_tenants_secret_on_a_connection_of_its_own(
        api, pool, db_url, http_server, monkeypatch):
    url, token = http_server
    monkeypatch.setenv("TICKWORK_SECRET_KEY", new_key())

    async def set_secret(value: str) -> None:
        response = await api.post("/v1/secrets", json={"name": "WEB_TOKEN", "value": value})
        assert response.status_code == 201

    await set_secret(f"Bearer {token}")
    entry = {"name": "web", "url": url, "headers": {"Authorization": "secret:WEB_TOKEN"},
             "tools": ["whoami", "header"], "classes": {"whoami": "read", "header": "read"}}
    script = [{"tool_calls": [call("web.whoami"), call("web.header")]}, {"text": "Checked."}]
    async with mcp(db_url, entry) as servers:
        vendor = servers.vendors[0]
        assert vendor.shared is None and not vendor.by_tenant  # nothing before a tenant calls
        results = []
        for _ in range(2):  # the second run reuses the tenant's connection
            _, run, provider = await run_with(api, pool, db_url, servers,
                                              ["web.whoami", "web.header"], script)
            assert run["outcome"] == "done"
            results.append(tool_results(provider))
        assert len(vendor.by_tenant) == 1
        await set_secret("Bearer not-the-token")  # set anew: the next call connects anew
        _, _, provider = await run_with(api, pool, db_url, servers,
                                        ["web.whoami", "web.header"], script)
        results.append(tool_results(provider))
    assert [r[0] for r in results] == ["authorized", "authorized", "refused"]
    # The server echoed the header: every run, not only the one that connected, scrubs it.
    assert all(token not in r[1] and r[1] for r in results)
    assert "not-the-token" not in results[2][1]


# --- a server that hangs, one that crashes, one that answers hugely and lies ------------------

async def test_a_hanging_call_is_stopped_by_the_tool_timeout_and_the_session_goes_on(
        api, pool, db_url):
    async with mcp(db_url, stdio("slow", "hangs.py",
                                 classes={"hang": "read", "echo": "read"})) as servers:
        _, run, provider = await run_with(
            api, pool, db_url, servers, ["slow.hang", "slow.echo"],
            [{"tool_calls": [call("slow.hang")]}, {"tool_calls": [call("slow.echo", text="still")]},
             {"text": "Done."}], tool_timeout_seconds=1)
    stopped, after = tool_results(provider)
    assert "stopped after 1 s" in stopped["error"]
    assert after == "still"


async def test_a_server_that_crashes_mid_call_fails_that_call_and_is_started_again(
        api, pool, db_url):
    async with mcp(db_url, stdio("fragile", "crashes.py",
                                 classes={"crash": "read", "pid": "read"})) as servers:
        _, run, provider = await run_with(
            api, pool, db_url, servers, ["fragile.crash", "fragile.pid"],
            [{"tool_calls": [call("fragile.pid")]}, {"tool_calls": [call("fragile.crash")]},
             {"tool_calls": [call("fragile.pid")]}, {"text": "Done."}])
    first, crashed, second = tool_results(provider)
    assert "closed its connection during the call" in crashed["error"]
    assert first.isdigit() and second.isdigit() and first != second  # a new server process


async def test_a_huge_result_is_bounded_and_offloaded_and_a_lying_tool_costs_only_itself(
        api, pool, db_url):
    async with mcp(db_url, stdio("big", "huge.py", classes={"huge": "read"}),
                   stdio("good", "good.py", classes={"echo": "read"})) as servers:
        keys = {s.key for s in servers.specs}
        assert "big.huge" in keys and "big.bad" not in keys and "good.echo" in keys
        _, run, provider = await run_with(
            api, pool, db_url, servers, ["big.huge", "good.echo"],
            [{"tool_calls": [call("big.huge", chars=MAX_RESULT_CHARS + 500_000)]},
             {"tool_calls": [call("good.echo", text="fine")]}, {"text": "Done."}])
    offloaded, fine = tool_results(provider)
    told = offloaded
    assert told["offloaded"] is True and told["chars"] < MAX_RESULT_CHARS + 200
    assert fine == "fine"


async def test_a_server_that_cannot_start_is_disabled_and_the_others_serve(db_url):
    closed = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    async with mcp(db_url, stdio("gone", "refuses.py"), {"name": "down", "url": closed},
                   stdio("good", "good.py", tools=["echo"])) as servers:
        assert [s.key for s in servers.specs] == ["good.echo"]
        assert [v.config.name for v in servers.vendors] == ["good"]


# --- the real worker process: TICKWORK_TOOLS_FILE at start, servers stopped with it -----------

def processes_tagged(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_a_worker_process_starts_its_servers_from_the_tools_file_and_stops_them(
        api, db_url, tmp_path):
    from tests.integration.workers import WorkerProcess

    tag = f"mcp-tag-{os.urandom(4).hex()}"
    tools_file = tmp_path / "tools.yaml"
    tools_file.write_text(json.dumps({"mcp": [  # JSON is YAML
        {"name": "gone", "command": [sys.executable, str(SERVERS / "refuses.py")]},
        {"name": "good", "command": [sys.executable, str(SERVERS / "good.py"), tag],
         "tools": ["echo"], "classes": {"echo": "read"}}]}))
    process = WorkerProcess(db_url, TICKWORK_TOOLS_FILE=str(tools_file))
    try:
        await until(db_url, "SELECT count(*) = 1 FROM tool_catalog WHERE key = 'good.echo'")
        agent_id = await agent(api, ["good.echo"], name="mcp-process")
        run_id = await queue_run(api, agent_id, {"script": [
            {"tool_calls": [call("good.echo", text="over stdio")]}, {"text": "Done."}]})
        await until(db_url, *done(run_id))
        completes = of_type(await events(api, run_id), "tool_complete")
        assert [(c["tool"], c["ok"]) for c in completes] == [("good.echo", True)]
        assert len(processes_tagged(tag)) == 1  # one connection per worker
        disabled = [json.loads(line) for line in process.log().splitlines()
                    if '"mcp_server_disabled"' in line]
        assert [line["server"] for line in disabled] == ["gone"]
    finally:
        assert process.terminate() == 0, process.log()
    assert processes_tagged(tag) == []  # the server it spawned went with it


async def test_each_tenant_gets_a_connection_with_its_own_secret(http_server):
    from types import SimpleNamespace
    from uuid import uuid4

    url, token = http_server
    entry = {"name": "web", "url": url, "headers": {"Authorization": "secret:WEB_TOKEN"},
             "tools": ["whoami"], "classes": {"whoami": "read"}}
    servers = await McpServers.start(parse_tools({"mcp": [entry]}))
    whoami = servers.specs[0].function

    def tenant(value: str) -> SimpleNamespace:
        async def secret(name: str) -> str:
            assert name == "WEB_TOKEN"
            return value
        return SimpleNamespace(tenant_id=uuid4(), secret=secret)

    acme, globex = tenant(f"Bearer {token}"), tenant("Bearer someone-else")
    try:
        answers = [await whoami(acme), await whoami(globex), await whoami(acme)]
        assert answers == ["authorized", "refused", "authorized"]
        assert set(servers.vendors[0].by_tenant) == {acme.tenant_id, globex.tenant_id}
    finally:
        await servers.aclose()
