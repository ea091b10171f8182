"""The composition root of every process: the API, the scheduler loop, the worker, and `up`
(all of it on one laptop): settings -> pool -> services -> serve."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from datetime import datetime

import structlog
import uvicorn
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.tick import TickOutcome, run_tick
from tickwork.sql.db import DatabaseSettings, open_pool, pool_sizes
from tickwork.sql.journal import JournalWriter
from tickwork.worker import tracing
from tickwork.worker.model import ModelProvider
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.run_wiring import RunDeps
from tickwork.worker.runner import Worker
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.tools.publish import publish_catalog
from tickwork.worker.tools.registry import ToolSpec, catalog
from tickwork.worker.webhooks.deliverer import serve_deliverer
from tickwork.worker.webhooks.settings import WebhookSettings

log = structlog.get_logger()


def start_minute_tick(pool: AsyncConnectionPool, settings: SchedulerSettings) -> AsyncIOScheduler:
    """APScheduler only decides *when*: at second 0 of every minute, one at a time, missed
    runs coalesced into one (the tick itself re-evaluates everything that is due)."""
    jobs = AsyncIOScheduler(timezone="UTC")
    jobs.add_job(run_tick, CronTrigger(second=0, timezone="UTC"), args=[pool, settings],
                 id="minute_tick", coalesce=True, max_instances=1, misfire_grace_time=30)
    jobs.start()
    return jobs


async def serve_scheduler(url: str, settings: SchedulerSettings) -> None:
    pool = await open_pool(url, application_name="tickwork-scheduler",
                           **pool_sizes(DatabaseSettings()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    jobs = start_minute_tick(pool, settings)
    log.info("scheduler_started")
    await stop.wait()
    jobs.shutdown(wait=False)
    await pool.close()
    log.info("scheduler_stopped")


class _QuietExitServer(uvicorn.Server):
    """uvicorn re-raises a captured SIGINT/SIGTERM after shutting down, which turns a clean
    stop into exit status 130/143. We stop on those signals ourselves and exit 0."""

    @contextlib.contextmanager
    def capture_signals(self):
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        yield


async def serve_api(url: str, settings: SchedulerSettings, host: str, port: int,
                    *, with_scheduler: bool = False, with_worker: bool = False) -> None:
    # No per-checkout round trip: the pool replaces connections the server hung up on for free
    # (sql.db.Pool), and live tails take connections often enough for a round trip to show.
    pool = await open_pool(url, application_name="tickwork-api", **pool_sizes(DatabaseSettings()))
    app = create_app(settings, pool=pool)
    # Live tails never end on their own: a shutdown gives them 5 s, then closes them (clients
    # resume from Last-Event-ID against another API process).
    # httptools: uvicorn's compiled HTTP parser (h11, its pure-Python one, cost more CPU per
    # request than our handler did). The event loop is uvloop when started by run_api.
    server = _QuietExitServer(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                             access_log=False, timeout_graceful_shutdown=5,
                                             http="httptools"))
    jobs = start_minute_tick(pool, settings) if with_scheduler else None
    stop_worker = asyncio.Event()
    worker = asyncio.create_task(_worker(url, stop_worker)) if with_worker else None
    try:
        await server.serve()  # returns on SIGINT/SIGTERM
    finally:
        if jobs is not None:
            jobs.shutdown(wait=False)
        if worker is not None:
            stop_worker.set()
            await worker
        await pool.close()


def run_api(url: str, settings: SchedulerSettings, host: str, port: int) -> None:
    """`tickwork api`: serve_api on a uvloop event loop (less CPU per request and per
    database round trip than asyncio's own loop)."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_api(url, settings, host, port))


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_deps(pool: AsyncConnectionPool, settings: WorkerSettings, *,
                provider: ModelProvider | None = None, specs: list[ToolSpec] | None = None,
                worker: str | None = None) -> RunDeps:
    """What every run of a worker is given; a test passes its own provider and worker name."""
    specs = catalog() if specs is None else specs
    return RunDeps(pool=pool, provider=provider or build_router(ProviderSettings()),
                   catalog={spec.key: spec for spec in specs}, settings=settings,
                   worker_id=worker or worker_id(), journal_writer=JournalWriter(pool))


async def build_worker(url: str, settings: WorkerSettings) -> Worker:
    """The worker's wiring: the tool catalog published, a pool, the model router, a Worker."""
    specs = catalog()
    await asyncio.to_thread(publish_catalog, url, specs)  # the API validates agents against it
    # The operator's pool size, not one per run: a run holds a connection only while one of
    # its statements runs, never while its model or a tool works.
    pool = await open_pool(url, application_name="tickwork-worker",
                           **pool_sizes(DatabaseSettings()))
    return Worker(worker_deps(pool, settings, specs=specs), url)


async def serve_worker(url: str, settings: WorkerSettings, stop: asyncio.Event | None = None,
                       webhooks: WebhookSettings | None = None) -> None:
    """`tickwork worker` (and `up`'s worker): runs until ``stop`` is set, or SIGINT/SIGTERM."""
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
        await worker.deps.journal_writer.close()
        await worker.deps.provider.aclose()
        await worker.deps.pool.close()
        await asyncio.to_thread(tracing.shutdown)  # exports the spans still batched


async def _worker(url: str, stop: asyncio.Event) -> None:
    await serve_worker(url, WorkerSettings(), stop, up_webhook_settings())


def up_webhook_settings() -> WebhookSettings:
    """`up` is one person's machine: a webhook to a receiver on it (or on the home network) is
    delivered unless TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES says otherwise."""
    webhooks = WebhookSettings()
    if "webhook_allow_private_addresses" not in webhooks.model_fields_set:
        webhooks = webhooks.model_copy(update={"webhook_allow_private_addresses": True})
    return webhooks


async def tick_now(url: str, settings: SchedulerSettings, at: datetime | None) -> TickOutcome:
    pool = await open_pool(url, application_name="tickwork-tick", max_size=2)
    try:
        return await run_tick(pool, settings, now=at)
    finally:
        await pool.close()
