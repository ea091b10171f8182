"""The FastAPI application: routes, error shapes, the body guard, and the pool's lifetime."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from tickwork.scheduler.api import (agents_routes, approvals_routes, ops_routes, runs_routes,
                           schedules_routes, stats_routes, tokens_routes, viewer,
                           webhooks_routes)
from tickwork.scheduler.api.body_guard import BodyGuard
from tickwork.scheduler.api.errors import install_error_handlers
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.sql.db import open_pool

MAX_BODY_BYTES = 1024 * 1024


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
        app.state.pool = pool or await open_pool(database_url, application_name="tickwork-api")
        try:
            yield
        finally:
            await stop_hub(app)
            if owned:
                await app.state.pool.close()

    docs = settings.api_docs  # off by default: those pages run a CDN's scripts
    app = FastAPI(title="tickwork", version="0.1.0", lifespan=lifespan,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  description="A Postgres-native job queue and scheduler for AI-agent runs.")
    app.state.settings = settings
    if pool is not None:
        app.state.pool = pool
    for module in (agents_routes, schedules_routes, runs_routes, approvals_routes, ops_routes,
                   tokens_routes, webhooks_routes, stats_routes, viewer):
        app.include_router(module.router)
    install_error_handlers(app)
    app.add_middleware(BodyGuard, max_bytes=MAX_BODY_BYTES)
    return app
