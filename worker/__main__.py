"""Wiring of a worker process: settings -> pool -> providers -> tools -> Worker."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

from tickwork.sql.db import DatabaseSettings, open_pool, pool_sizes
from tickwork.sql.finisher import Finisher
from tickwork.worker import tracing
from tickwork.worker.run_wiring import RunDeps
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.runner import Worker
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.tools.publish import publish_catalog
from tickwork.worker.tools.registry import catalog
from tickwork.worker.webhooks.deliverer import serve_deliverer
from tickwork.worker.webhooks.settings import WebhookSettings


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def build_worker(url: str, settings: WorkerSettings) -> Worker:
    specs = catalog()
    await asyncio.to_thread(publish_catalog, url, specs)  # the API validates agents against it
    # The operator's pool size, not one per run: a run holds a connection only while one of
    # its statements runs, never while its model or a tool works.
    pool = await open_pool(url, application_name="tickwork-worker",
                           **pool_sizes(DatabaseSettings()))
    deps = RunDeps(pool=pool, provider=build_router(ProviderSettings()),
                   catalog={spec.key: spec for spec in specs}, settings=settings,
                   worker_id=worker_id(), finisher=Finisher(pool))
    return Worker(deps, url)


async def serve_worker(url: str, settings: WorkerSettings, stop: asyncio.Event | None = None,
                       webhooks: WebhookSettings | None = None) -> None:
    tracing.setup()  # only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    worker = await build_worker(url, settings)
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
        await worker.deps.finisher.close()
        await worker.deps.provider.aclose()
        await worker.deps.pool.close()
        await asyncio.to_thread(tracing.shutdown)  # exports the spans still batched
