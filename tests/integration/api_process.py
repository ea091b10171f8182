"""A real `tickwork api` process on a free port, for tests that need one (its log is kept),
and tokens made straight in its database."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tickwork.scheduler.tokens import create_token
from tickwork.sql.db import connect

ROOT = Path(__file__).resolve().parents[2]


class ApiProcess:
    """`tickwork api` as a real process on a free port; its log is kept for the test to read."""

    def __init__(self, url: str, root: Path, **env: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.log_path = root / f"api-{self.port}.log"
        self.process = subprocess.Popen(  # its log lines (stdout) and warnings (stderr)
            [sys.executable, "-m", "tickwork.cli", "api", "--port", str(self.port)], cwd=ROOT,
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "TICKWORK_DATABASE_URL": url, "TICKWORK_TEST_MODE": "1", **env})
        self.base_url = f"http://127.0.0.1:{self.port}"

    async def ready(self) -> None:
        async with httpx.AsyncClient(base_url=self.base_url) as client:
            for _ in range(600):  # a process that starts: no event to wait on but its port
                assert self.process.poll() is None, self.log()
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError(f"tickwork api never became healthy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=30)


async def tokens_for(url: str) -> dict[str, str]:
    conn = await connect(url, application_name="tickwork-test")
    try:
        return {"admin": await create_token(conn, tenant="acme", admin=True),
                "operator": await create_token(conn, operator=True)}
    finally:
        await conn.close()
