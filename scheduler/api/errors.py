"""Every error leaves the API as JSON with a machine-readable code and a human sentence."""

from __future__ import annotations

from typing import Any

import psycopg
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tickwork.scheduler.agents import UnknownTools
from tickwork.scheduler.api.tenant_rate import TenantRateLimited
from tickwork.scheduler.api.throttle import TooManyFailures
from tickwork.sql.db import translate_error
from tickwork.sql.errors import (Conflict, Forbidden, InvalidInput, NotFound, TickworkError,
                                 Unauthorized)
from tickwork.sql.sealed import SecretsUnavailable

log = structlog.get_logger()

# The one place an error's class becomes an HTTP status; a subclass answers with its nearest
# listed ancestor's (AgentPaused is a Conflict: 409). The errors themselves know nothing of HTTP.
STATUS: dict[type[TickworkError], int] = {
    TickworkError: 400,
    UnknownTools: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    InvalidInput: 422,
    TooManyFailures: 429,
    SecretsUnavailable: 503,
    TenantRateLimited: 429,
}


def http_status(exc: TickworkError) -> int:
    """The status an error answers with: its class's, or its nearest listed ancestor's."""
    return next(STATUS[kind] for kind in type(exc).__mro__ if kind in STATUS)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _sentence(error: dict[str, Any]) -> str:
    field = _field(tuple(error.get("loc", ())))
    if error.get("type") == "extra_forbidden":
        return f"unknown field {field!r}; remove it (see GET /openapi.json for the fields)"
    if error.get("type") == "missing":
        return f"{field} is required"
    return f"{field}: {error.get('msg', 'is not valid')}"


def tickwork_response(exc: TickworkError) -> JSONResponse:
    # An error that says when to come back says it in the header clients read, too.
    wait = exc.fields.get("retry_after")
    return JSONResponse(exc.as_body(), status_code=http_status(exc),
                        headers=None if wait is None else {"Retry-After": str(wait)})


def database_response(exc: psycopg.Error) -> JSONResponse:
    """A database error as the request's answer: a constraint's own error, a value the driver
    refused (the request's fault), else 503 (the database's, worth retrying)."""
    translated = translate_error(exc)
    if translated is not None:
        return tickwork_response(translated)
    if isinstance(exc, psycopg.DataError) and exc.sqlstate is None:
        # Refused by the driver before reaching the server (e.g. a NUL character): the
        # request is at fault, and retrying it will not help.
        return JSONResponse({"error": "invalid_input",
                             "message": f"a value cannot be stored: {exc}"}, status_code=422)
    log.error("database_error", error_type=type(exc).__name__, sqlstate=exc.sqlstate)
    return JSONResponse({"error": "database_unavailable",
                         "message": "the database could not complete the request; try again"},
                        status_code=503)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TickworkError)
    async def _tickwork(_: Request, exc: TickworkError) -> JSONResponse:
        return tickwork_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        code = "invalid_path" if first.get("loc", ("",))[0] == "path" else "invalid_input"
        return JSONResponse({"error": code, "message": _sentence(first),
                             "field": _field(tuple(first.get("loc", ())))}, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        message = "no such route; see GET /openapi.json" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse({"error": f"http_{exc.status_code}", "message": message},
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(psycopg.Error)
    async def _database(_: Request, exc: psycopg.Error) -> JSONResponse:
        return database_response(exc)
