"""Request dependencies: the pool, the authenticated tenant, and one connection per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import Depends, Request
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from scheduler.settings import SchedulerSettings
from scheduler.api.throttle import AuthThrottle
from scheduler.tokens import Principal, authenticate
from sql.errors import Forbidden, Unauthorized


@dataclass
class Session:
    conn: AsyncConnection
    principal: Principal


def pool_of(request: Request) -> AsyncConnectionPool:
    return request.app.state.pool


def settings_of(request: Request) -> SchedulerSettings:
    return request.app.state.settings


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("this route needs a token: send Authorization: Bearer <token> "
                           "(create one with `tickwork token create --tenant NAME`)")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return token


def throttle_of(request: Request) -> AuthThrottle:
    state = request.app.state
    if getattr(state, "throttle", None) is None:
        settings = settings_of(request)
        state.throttle = AuthThrottle(limit=settings.auth_failure_limit,
                                      window_seconds=settings.auth_failure_window_seconds)
    return state.throttle


async def authenticated(request: Request, conn: AsyncConnection) -> Principal:
    """The request's principal; failures count against the client's address."""
    client = request.client.host if request.client else "unknown"
    throttle = throttle_of(request)
    throttle.check(client)
    try:
        return await authenticate(conn, bearer_token(request))
    except Unauthorized:
        throttle.failed(client)
        raise


async def session(request: Request) -> AsyncIterator[Session]:
    async with pool_of(request).connection() as conn:
        principal = await authenticated(request, conn)
        yield Session(conn, principal)


async def principal_only(request: Request) -> Principal:
    """Authenticate and give the connection back at once: for routes that take their own
    connections from the pool (a tick), so a request never holds one while waiting for more."""
    async with pool_of(request).connection() as conn:
        return await authenticated(request, conn)


async def admin_principal(principal: Principal = Depends(principal_only)) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this route needs an admin token (`tickwork token create --admin`)")
    return principal


def hub_of(request: Request):
    """The process's one event hub, started on first use (one LISTEN connection per process)."""
    from scheduler.api.hub import EventHub

    state = request.app.state
    if getattr(state, "hub", None) is None:
        settings = settings_of(request)
        state.hub = EventHub(pool_of(request), pool_of(request).conninfo,
                             poll_seconds=settings.tail_poll_seconds)
        state.hub.start()
    return state.hub


async def counted(app, body):
    """Count live tails for the metrics while a stream is open."""
    app.state.sse_subscribers = getattr(app.state, "sse_subscribers", 0) + 1
    try:
        async for chunk in body:
            yield chunk
    finally:
        app.state.sse_subscribers -= 1
