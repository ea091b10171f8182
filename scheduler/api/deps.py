"""Request dependencies: the pool, the authenticated tenant, and one connection per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import Depends, Request
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from scheduler.settings import SchedulerSettings
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


async def session(request: Request) -> AsyncIterator[Session]:
    token = bearer_token(request)
    async with pool_of(request).connection() as conn:
        principal = await authenticate(conn, token)
        yield Session(conn, principal)


async def principal_only(request: Request) -> Principal:
    """Authenticate and give the connection back at once: for routes that take their own
    connections from the pool (a tick), so a request never holds one while waiting for more."""
    token = bearer_token(request)
    async with pool_of(request).connection() as conn:
        return await authenticate(conn, token)


async def admin_principal(principal: Principal = Depends(principal_only)) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this route needs an admin token (`tickwork token create --admin`)")
    return principal
