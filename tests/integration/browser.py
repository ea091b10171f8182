"""Helpers for browser tests: Debian's Chromium driven by Playwright (no browser download), and
the app served by uvicorn on a port it keeps across restarts (to cut live connections)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from contextlib import asynccontextmanager
from typing import AsyncIterator

import uvicorn

CHROMIUM = os.environ.get("TICKWORK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = "/tmp/tickwork-artifacts"


class LiveServer:
    """The app on 127.0.0.1:<port>; restart() cuts every open connection and serves again on
    the same port, as a redeployed API process would."""

    def __init__(self, app) -> None:
        self.app = app
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        # Open SSE streams would hold a graceful shutdown forever: give them 2 s.
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            assert not self.task.done(), f"uvicorn could not serve on port {self.port}"
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        for connection in list(self.server.server_state.connections):
            connection.transport.close()  # the cut: open streams end here, mid-run
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 30)

    async def restart(self) -> None:
        await self.stop()
        await self.start()


@asynccontextmanager
async def serving(app) -> AsyncIterator[LiveServer]:
    server = LiveServer(app)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()  # the app's lifespan stops its hub


@asynccontextmanager
async def chromium_page() -> AsyncIterator:
    """A fresh page in the system Chromium; uncaught page errors fail the test."""
    import playwright.async_api as playwright_api  # the test extra installs it

    # A missing browser fails the lane (a skipped browser test is not a pass); .ci/run installs
    # Debian's Chromium before running it.
    assert os.path.exists(CHROMIUM), f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                   headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            page.page_errors = []
            page.on("pageerror", lambda error: page.page_errors.append(error))
            yield page
            assert not page.page_errors, page.page_errors
        finally:
            await browser.close()


async def screenshot(page, name: str) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    await page.screenshot(path=path, full_page=True)
    print(f"screenshot: {path}")
    return path
