"""POST /v1/agents/{id}/runs, the route that takes bursts, served without the framework's
per-request machinery (no route search, no dependency solving, no response model: about half
of the API's CPU per run start).

It serves only requests whose every part it reads exactly as the FastAPI route would: a UUID
in the path in its usual form, no body or a JSON object that RunIn accepts, at most one
non-empty Idempotency-Key of at most 200 characters. Anything else goes on, untouched, to the
FastAPI route, which also describes the route in the OpenAPI document and words the refusal
of a malformed request. What it serves goes through the route's own parts: the session
dependency (the token, the failed-login brake, the tenant's scope), the route's start_run,
the same error bodies (scheduler/api/errors.py) and the same JSON encoder for the answer
(pydantic's, as FastAPI uses for a route whose return annotation is dict). A start without an
Idempotency-Key is written with the other starts that arrive beside it, in one statement
(scheduler/run_batch.py); its token comes from the token cache when it is there, so such a
request holds no connection of its own.
"""

from __future__ import annotations

import json
import re
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import psycopg
from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.scheduler.api.agents_routes import start_run
from tickwork.scheduler.api.body_guard import replay
from tickwork.scheduler.api.deps import session, tenant_principal
from tickwork.scheduler.api.errors import database_response, tickwork_response
from tickwork.scheduler.models import RunIn
from tickwork.sql.errors import TickworkError

_HEX = "[0-9a-fA-F]"
_PATH = re.compile(f"/v1/agents/({_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}})"
                   "/runs", re.ASCII)
_KEY_HEADER = b"idempotency-key"
_MAX_KEY = 200  # the route's Header(max_length=200)
_ANSWER = TypeAdapter(dict)  # the route's return annotation, as FastAPI serialises it
_tenant_session = asynccontextmanager(session)


class RunStartRoute:
    """ASGI middleware in front of the router for the one hot route (see the module's note).
    ``served`` counts the requests it answered itself (the tests read it)."""

    served = 0

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Behind a root path (none is set by tickwork) the router's own matching decides.
        found = (_PATH.fullmatch(scope["path"]) if scope["type"] == "http"
                 and scope["method"] == "POST" and not scope.get("root_path") else None)
        if found is None:
            await self.app(scope, receive, send)
            return
        body = await _read(receive)
        request = _readable(scope, found.group(1), body)
        if request is None:
            await self.app(scope, replay(body), send)
            return
        RunStartRoute.served += 1
        response = await _serve(scope, *request)
        await response(scope, replay(b""), send)


def _readable(scope: Scope, agent_id: str, body: bytes) -> tuple[UUID, RunIn, str | None] | None:
    """The request as the route's parameters, or None when the route itself should read it."""
    keys = [value for name, value in scope["headers"] if name == _KEY_HEADER]
    if len(keys) > 1 or (keys and not 0 < len(keys[0]) <= _MAX_KEY):
        return None
    try:  # the route parses the body with json.loads too, then validates it as RunIn
        run = RunIn() if not body else RunIn.model_validate(_json_object(body))
    except Exception:  # any refusal is the route's to word
        return None
    return UUID(agent_id), run, keys[0].decode("latin-1") if keys else None


def _json_object(body: bytes) -> dict[str, Any]:
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


async def _serve(scope: Scope, agent_id: UUID, run: RunIn, key: str | None) -> Response:
    try:
        if key is None:  # shared statements (scheduler/run_batch.py)
            principal = await tenant_principal(Request(scope))
            started = await scope["app"].state.run_starts.start(
                principal.tenant_id, agent_id, run_input=run.input,
                timeout_minutes=run.timeout_minutes)
        else:
            async with _tenant_session(Request(scope)) as s:
                started = await start_run(s, agent_id, run, key, scope["app"].state.notifier)
    except TickworkError as exc:
        return tickwork_response(exc)
    except psycopg.Error as exc:
        return database_response(exc)
    return Response(_ANSWER.dump_json(started), status_code=202, media_type="application/json")


async def _read(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)
