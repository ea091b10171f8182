"""The composition root of every process: the API, the scheduler loop and `up` (all of it on
one laptop) here, the worker in its sibling tickwork/worker_process.py (so a worker process
never loads the API's web stack): settings -> pool -> services -> serve."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from datetime import datetime

import structlog
import uvicorn
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from psycopg_pool import AsyncConnectionPool

from tickwork.http_guard import guarded_protocol
from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.tick import TickOutcome, run_tick
from tickwork.sql.db import DatabaseSettings, open_pool, pool_sizes
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.webhooks.settings import WebhookSettings
from tickwork.runtime import run_on_uvloop, settle_after_start_up
from tickwork.worker_process import serve_worker

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
    settle_after_start_up()
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


def api_server_config(app, host: str, port: int) -> uvicorn.Config:
    """How `tickwork api` serves the app. Live tails never end on their own: a shutdown gives
    them 5 s, then closes them (clients resume from Last-Event-ID against another API
    process). httptools: uvicorn's compiled HTTP parser (h11, its pure-Python one, cost more
    CPU per request than our handler did); the event loop is uvloop when started by run_api.
    proxy_headers off: X-Forwarded-For is believed only from TICKWORK_TRUSTED_PROXIES (the
    failed-login brake's client_address); uvicorn's own handling would believe any local
    peer's header first, so a client on the same host could rotate it to evade the brake.
    The protocol is httptools' with a cap on connections and deadlines for headers and bodies
    (tickwork/http_guard.py), set by the app's settings."""
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                          timeout_graceful_shutdown=5, http=guarded_protocol(app.state.settings),
                          proxy_headers=False)


async def serve_api(url: str, settings: SchedulerSettings, host: str, port: int,
                    *, with_scheduler: bool = False, with_worker: bool = False) -> None:
    # No per-checkout round trip: the pool replaces connections the server hung up on for free
    # (sql.db.Pool), and live tails take connections often enough for a round trip to show.
    pool = await open_pool(url, application_name="tickwork-api", **pool_sizes(DatabaseSettings()))
    app = create_app(settings, pool=pool)
    server = _QuietExitServer(api_server_config(app, host, port))
    jobs = start_minute_tick(pool, settings) if with_scheduler else None
    stop_worker = asyncio.Event()
    worker = asyncio.create_task(_worker(url, stop_worker)) if with_worker else None
    try:
        settle_after_start_up()
        await server.serve()  # returns on SIGINT/SIGTERM
    finally:
        if jobs is not None:
            jobs.shutdown(wait=False)
        if worker is not None:
            stop_worker.set()
            await worker
        await pool.close()


def run_api(url: str, settings: SchedulerSettings, host: str, port: int) -> None:
    """`tickwork api`: serve_api on a uvloop event loop."""
    run_on_uvloop(serve_api(url, settings, host, port))


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
