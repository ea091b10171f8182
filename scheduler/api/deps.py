"""Request dependencies: the pool, the authenticated tenant, and one connection per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import Depends, Request
from psycopg import AsyncConnection

from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.api.hub import EventHub
from tickwork.scheduler.api.tenant_scope import AllTenantsPool, TenantConnection
from tickwork.scheduler.api.throttle import AuthThrottle, TooManyFailures, client_address
from tickwork.scheduler.tokens import TOKEN_CACHE, Principal, authenticate, cached_principal
from tickwork.sql.errors import Forbidden, Unauthorized
from tickwork.sql.notify import Notifier


@dataclass
class Session:
    conn: AsyncConnection
    principal: Principal


def pool_of(request: Request) -> AllTenantsPool:
    """The pool for work that spans tenants by design and checks the tenant itself (the tick,
    metrics, tokens, the tail): its transactions see every tenant's rows under row-level
    security. A tenant's routes use ``session`` instead."""
    return AllTenantsPool(request.app.state.pool)


def notifier_of(request: Request) -> Notifier:
    """The process's sender of post-commit wake-ups (sql/notify.py), made with the app."""
    return request.app.state.notifier


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


def client_of(request: Request) -> str:
    """The address failed attempts count against (X-Forwarded-For only from trusted proxies).
    Every X-Forwarded-For line counts, in order, as one list (repeated header lines are one
    comma-separated field, RFC 9110 5.3): a proxy that appends its own line after the client's
    is read last, so a line the client sent first cannot stand in for it."""
    peer = request.client.host if request.client else "unknown"
    forwarded = ",".join(request.headers.getlist("x-forwarded-for")) or None
    return client_address(peer, forwarded, request.app.state.trusted_proxies)


async def authenticated(request: Request, conn: AsyncConnection) -> Principal:
    """The request's principal. The token is checked first, so a valid one always passes;
    a presented token that fails counts against the client's address, and an address over
    the limit gets 429 instead of 401 (a request with no token at all is not a guess). A token
    seen in the last second is not looked up again (scheduler.tokens.TokenCache)."""
    throttle: AuthThrottle = request.app.state.throttle  # made with the app
    token = bearer_token(request)
    try:
        return await authenticate(conn, token, TOKEN_CACHE)
    except Unauthorized:
        client = client_of(request)
        metrics = request.app.state.metrics
        metrics.auth_failures.inc()
        try:
            throttle.check(client)
        except TooManyFailures:
            metrics.auth_throttled.inc()
            raise
        throttle.failed(client)
        raise


def charged(request: Request, principal: Principal) -> Principal:
    """A tenant's request counted against its rate (scheduler/api/tenant_rate.py): 429 past it."""
    request.app.state.tenant_rate.charge(principal.tenant_id)
    return principal


def tenant_only(principal: Principal) -> Principal:
    if principal.is_operator:
        raise Forbidden("an operator token manages the cluster (metrics, the tick, tokens), not "
                        "a tenant's agents and runs; use a tenant token (`tickwork token create "
                        "--tenant NAME`)")
    return principal


async def session(request: Request) -> AsyncIterator[Session]:
    """A tenant's request: its connection and principal (operator tokens are refused). The
    connection only ever works as that tenant (row-level security, scheduler/api/tenant_scope.py)."""
    async with request.app.state.pool.connection() as conn:
        principal = charged(request, tenant_only(await authenticated(request, conn)))
        yield Session(TenantConnection(conn, principal.tenant_id), principal)


async def tenant_principal(request: Request) -> Principal:
    """A tenant's principal (operator tokens are refused), with a pooled connection only when
    the token is not in the cache: a request whose statement is written by someone else (a
    batched run start) holds no connection of its own."""
    principal = cached_principal(bearer_token(request), TOKEN_CACHE)
    if principal is None:
        async with request.app.state.pool.connection() as conn:
            principal = await authenticated(request, conn)
    return charged(request, tenant_only(principal))


async def any_principal(request: Request) -> Principal:
    """Authenticate and give the connection back at once: for routes that take their own
    connections from the pool (a tick), so a request never holds one while waiting for more."""
    async with pool_of(request).connection() as conn:
        return await authenticated(request, conn)


async def principal_only(request: Request) -> Principal:
    """As any_principal, for a tenant's routes (operator tokens are refused)."""
    return charged(request, tenant_only(await any_principal(request)))


async def operator_principal(principal: Principal = Depends(any_principal)) -> Principal:
    """Cluster-wide routes (metrics spanning tenants, the global tick): operator tokens only."""
    if not principal.is_operator:
        raise Forbidden("this route spans every tenant and needs an operator token (`tickwork "
                        "token create --operator`); a tenant's admin token is not enough")
    return principal


async def token_manager(principal: Principal = Depends(any_principal)) -> Principal:
    """Token routes: a tenant's admin (its own tenant's tokens) or an operator (every token)."""
    if not (principal.is_admin or principal.is_operator):
        raise Forbidden("managing tokens needs an admin token (`tickwork token create --tenant "
                        "NAME --admin`) or an operator token")
    return principal


def hub_of(request: Request) -> EventHub:
    """The process's one event hub, started with the app (scheduler/api/app.py)."""
    return request.app.state.hub
