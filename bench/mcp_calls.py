"""Benchmark of an MCP tool call as a worker makes it: the overhead the MCP hop adds.

Run from the repo root:  .venv/bin/python bench/mcp_calls.py [--calls N]

No database: the SDK server tests/mcp_servers/good.py is started over stdio (a child process)
and over streamable HTTP (on a loopback port), and its ``echo`` tool is called N times through
the spec the worker publishes (worker/tools/mcp_vendor.py: argument check, the SDK client, the
result's text), then N times as a plain async function (the floor). Wall time per call
(median, p90) is printed; the last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tickwork.worker.tools.mcp_config import parse_tools
from tickwork.worker.tools.mcp_vendor import McpServers

SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp_servers" / "good.py"


async def timed(function, calls: int) -> dict[str, float]:
    spent = []
    for i in range(calls):
        started = time.perf_counter()
        await function(None, text=f"call {i}")
        spent.append((time.perf_counter() - started) * 1000)
    spent.sort()
    return {"median_ms": round(statistics.median(spent), 3),
            "p90_ms": round(spent[int(len(spent) * 0.9) - 1], 3)}


async def through(entry: dict, calls: int) -> dict[str, float]:
    servers = await McpServers.start(parse_tools({"mcp": [entry]}))
    try:
        echo = next(s for s in servers.specs if s.key.endswith(".echo"))
        await timed(echo.function, 5)  # warm
        return await timed(echo.function, calls)
    finally:
        await servers.aclose()


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def main(calls: int) -> dict:
    async def floor(_context, text: str) -> str:
        return text

    figures = {"calls": calls, "plain_function": await timed(floor, calls)}
    figures["stdio"] = await through({"name": "bench", "command": [sys.executable, str(SERVER)]},
                                     calls)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not listening(port):
            await asyncio.sleep(0.05)
        figures["http"] = await through({"name": "bench", "url": f"http://127.0.0.1:{port}/mcp"},
                                        calls)
    finally:
        server.terminate()
        server.wait(10)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    result = asyncio.run(main(args.calls))
    for name in ("plain_function", "stdio", "http"):
        print(f"{name:>15}: median {result[name]['median_ms']} ms, p90 {result[name]['p90_ms']} ms")
    print(json.dumps(result))
