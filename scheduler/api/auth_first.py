"""A request that may carry a body (POST, PUT, PATCH) is authenticated before a byte of its body
is read: every such route needs a token, so a client without a valid one is answered 401 (or
429 from the failed-login brake) while its body is still on the wire, and costs the API no
memory for it. Reading (and parsing) happens only for a principal the API knows, and then
within the body budget (scheduler/api/body_guard.py).

The check is the routes' own (deps.authenticated: the token cache, the brake, the same error
bodies); the route authenticates again and finds the token in the cache. It sits inside
OnceMore, so a lookup whose connection a Postgres restart cut is run once more like any other
statement."""

from __future__ import annotations

import psycopg
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.scheduler.api.deps import authenticated, bearer_token
from tickwork.scheduler.api.errors import database_response, tickwork_response
from tickwork.scheduler.tokens import TOKEN_CACHE, cached_principal
from tickwork.sql.errors import TickworkError

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def check_token(request: Request) -> None:
    """Raise as the routes would when the request's token is missing, malformed or unknown."""
    if cached_principal(bearer_token(request), TOKEN_CACHE) is not None:
        return
    async with request.app.state.pool.connection() as conn:
        await authenticated(request, conn)


class AuthFirst:
    """ASGI middleware: see the module's note."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        try:
            await check_token(Request(scope))
        except TickworkError as refused:
            response = tickwork_response(refused)
        except psycopg.Error as lost:
            response = database_response(lost)
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)
