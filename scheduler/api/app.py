"""The FastAPI application: routes, error shapes, the body guard, and what lives as long as the
app: the pool, the event hub, the token watch, the notifier and the failed-login brake, made at
startup."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.api import (agents_routes, approvals_routes, chats_routes, ops_routes,
                           runs_routes, schedules_routes, secrets_routes, stats_routes,
                           tokens_routes, viewer,
                           webhooks_routes)
from tickwork.scheduler.api.auth_first import AuthFirst
from tickwork.scheduler.api.body_guard import BodyBudget, BodyGuard
from tickwork.scheduler.api.errors import install_error_handlers
from tickwork.scheduler.api.hub import EventHub
from tickwork.scheduler.api.once_more import OnceMore
from tickwork.scheduler.api.revocation import RevocationWatch
from tickwork.scheduler.api.run_start import RunStartRoute
from tickwork.scheduler.api.tenant_scope import AllTenantsPool
from tickwork.scheduler.api.tenant_rate import TenantRateLimit
from tickwork.scheduler.api.throttle import AuthThrottle
from tickwork.scheduler.metrics import AppMetrics
from tickwork.scheduler.run_batch import RunStartBatcher
from tickwork.scheduler.settings import SchedulerSettings, parse_networks
from tickwork.sql.db import DatabaseSettings, open_pool
from tickwork.sql.notify import Notifier

MAX_BODY_BYTES = 1024 * 1024


def start_hub(app: FastAPI) -> None:
    """The process's one event hub (one LISTEN connection for every tail), started with the app.
    It reads across tenants: each tail checked its reader's tenant before subscribing."""
    pool = AllTenantsPool(app.state.pool)
    app.state.hub = EventHub(pool, DatabaseSettings().listen_url(pool.conninfo),
                             poll_seconds=app.state.settings.tail_poll_seconds)
    app.state.hub.start()
    app.state.revocation_watch = RevocationWatch(app.state.pool)


async def stop_hub(app: FastAPI) -> None:
    hub = getattr(app.state, "hub", None)
    if hub is not None:
        await hub.stop()
        app.state.hub = None


def create_app(settings: SchedulerSettings, *, database_url: str | None = None,
               pool: AsyncConnectionPool | None = None) -> FastAPI:
    """Build the app around an existing pool, or one it opens from ``database_url`` at startup."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        owned = pool is None
        if owned:
            app.state.pool = await open_pool(database_url, application_name="tickwork-api")
            app.state.notifier = Notifier(app.state.pool)
            app.state.run_starts = RunStartBatcher(app.state.pool, app.state.notifier)
        start_hub(app)
        try:
            yield
        finally:
            await stop_hub(app)
            await app.state.run_starts.drain()
            await app.state.notifier.drain()
            if owned:
                await app.state.pool.close()

    docs = settings.api_docs  # off by default: those pages run a CDN's scripts
    app = FastAPI(title="tickwork", version="0.1.0", lifespan=lifespan,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  description="A Postgres-native job queue and scheduler for AI-agent runs.")
    app.state.settings = settings
    # The brake and the metrics need neither the pool nor a running loop: made with the app.
    app.state.metrics = AppMetrics()
    app.state.throttle = AuthThrottle(limit=settings.auth_failure_limit,
                                      window_seconds=settings.auth_failure_window_seconds)
    app.state.trusted_proxies = parse_networks(settings.trusted_proxies)
    app.state.tenant_rate = TenantRateLimit(rate=settings.tenant_rate_limit,
                                            burst=settings.tenant_rate_burst)
    if pool is not None:
        app.state.pool = pool
        app.state.notifier = Notifier(pool)
        app.state.run_starts = RunStartBatcher(pool, app.state.notifier)
    for module in (agents_routes, schedules_routes, runs_routes, approvals_routes, ops_routes,
                   tokens_routes, webhooks_routes, secrets_routes, stats_routes, chats_routes,
                   viewer):
        app.include_router(module.router)
    install_error_handlers(app)
    app.add_middleware(RunStartRoute)  # inside the body guard: it sees only guarded bodies
    app.add_middleware(BodyGuard, max_bytes=MAX_BODY_BYTES,
                       budget=BodyBudget(settings.api_body_budget_bytes))
    app.add_middleware(AuthFirst)  # outside the body guard: no body is read before the token
    # Around the fast run start too: a request whose connection a restart cut, run once more.
    app.add_middleware(OnceMore)
    return app
