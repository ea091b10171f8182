"""The worker process's wiring, part of the composition root (tickwork/processes.py wires the
others): settings -> pool -> model router -> tools -> Worker, for `tickwork worker`, `up`, the
tests' in-process workers and the benches. It imports no API or scheduler module, so a worker
process does not load the web stack."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
from typing import TYPE_CHECKING

from psycopg_pool import AsyncConnectionPool

from tickwork.runtime import settle_after_start_up
from tickwork.sql.db import DatabaseSettings, open_pool, pool_sizes
from tickwork.sql.journal import JournalWriter
from tickwork.worker import tracing
from tickwork.worker.model import ModelProvider
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.run_wiring import RunDeps
from tickwork.worker.runner import Worker
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.tools.mcp_config import load_tools_file
from tickwork.worker.tools.publish import publish_catalog
from tickwork.worker.tools.registry import ToolSpec, catalog
from tickwork.worker.webhooks.deliverer import serve_deliverer
from tickwork.worker.webhooks.settings import WebhookSettings

if TYPE_CHECKING:
    from tickwork.worker.tools.mcp_vendor import McpServers


def worker_id() -> str:
    """Unique per process, even in a container restarted with the same hostname and pid 1:
    the sweep asks whether the worker that held a run is still there (sql/presence.py)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def worker_deps(pool: AsyncConnectionPool, settings: WorkerSettings, *,
                provider: ModelProvider | None = None, specs: list[ToolSpec] | None = None,
                worker: str | None = None) -> RunDeps:
    """What every run of a worker is given; a test passes its own provider and worker name."""
    specs = catalog() if specs is None else specs
    return RunDeps(pool=pool, provider=provider or build_router(ProviderSettings()),
                   catalog={spec.key: spec for spec in specs}, settings=settings,
                   worker_id=worker or worker_id(), journal_writer=JournalWriter(pool))


async def build_worker(url: str, settings: WorkerSettings,
                       specs: list[ToolSpec] | None = None) -> Worker:
    """The worker's wiring: the tool catalog published, a pool, the model router, a Worker."""
    specs = catalog() if specs is None else specs
    await asyncio.to_thread(publish_catalog, url, specs)  # the API validates agents against it
    # The operator's pool size, not one per run: a run holds a connection only while one of
    # its statements runs, never while its model or a tool works.
    pool = await open_pool(url, application_name="tickwork-worker",
                           **pool_sizes(DatabaseSettings()))
    # LISTEN and the presence lock need a session of their own: the direct URL when the main
    # one is a pooler in transaction mode.
    return Worker(worker_deps(pool, settings, specs=specs), DatabaseSettings().listen_url(url))


async def start_mcp_servers(specs: list[ToolSpec]) -> McpServers | NoMcpServers:
    """The MCP servers of TICKWORK_TOOLS_FILE (checked by the CLI before start), connected: one
    that cannot start is disabled and logged, and the worker starts without its tools. The
    SDK (which loads starlette) is imported only when the file lists a server."""
    configs = load_tools_file()
    if not configs:
        return NoMcpServers()
    from tickwork.worker.tools.mcp_vendor import McpServers

    return await McpServers.start(configs, taken={spec.key.split(".", 1)[0] for spec in specs})


class NoMcpServers:
    specs: list[ToolSpec] = []

    async def aclose(self) -> None:
        pass


async def serve_worker(url: str, settings: WorkerSettings, stop: asyncio.Event | None = None,
                       webhooks: WebhookSettings | None = None) -> None:
    """`tickwork worker` (and `up`'s worker): runs until ``stop`` is set, or SIGINT/SIGTERM."""
    tracing.setup()  # only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    specs = catalog()
    mcp = await start_mcp_servers(specs)
    try:
        worker = await build_worker(url, settings, specs + mcp.specs)
    except BaseException:
        await mcp.aclose()
        raise
    settle_after_start_up()
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    # Webhook deliveries go on while the runs drain (their ends are events too), then stop.
    deliveries_stop = asyncio.Event()
    deliveries = asyncio.create_task(serve_deliverer(url, webhooks or WebhookSettings(),
                                                     deliveries_stop))
    try:
        await worker.run(stop)
    finally:
        deliveries_stop.set()
        await deliveries
        await worker.deps.journal_writer.close()
        await worker.deps.provider.aclose()
        await worker.deps.pool.close()
        await mcp.aclose()  # stops the stdio servers it spawned
        await asyncio.to_thread(tracing.shutdown)  # exports the spans still batched
