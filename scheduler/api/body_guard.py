"""Refuse bad requests before the framework parses them: body size, content type, invalid JSON,
depth, duplicate keys, NUL characters in query parameters or headers (Postgres cannot store
them), and more bodies at once than the budget allows. Values inside a body (text with NUL, NaN,
Infinity, numbers too large to store) are checked by the request models, which know each
field's name. Each refusal is a JSON error with a sentence; the buffered body is handed on
unchanged when it passes.

The budget bounds the memory that bodies being read and parsed can take together: a request
reserves its declared length (the most a body may be, when it is sent in chunks) before its
body is read and keeps it until the app has answered it (the framework parses the body again
for the route). One that does not fit is answered 503 with Retry-After at once, unread. Only
authenticated requests get here (scheduler/api/auth_first.py)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_DEPTH = 32


class BodyRefused(Exception):
    def __init__(self, status: int, code: str, message: str,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after


class BodyBudget:
    """Bytes of request bodies the process holds at once. One event loop: no lock needed."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0

    def take(self, size: int) -> bool:
        if size and self.used + size > self.total:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise BodyRefused(400, "duplicate_key", f"the JSON body has the key {key[:50]!r} twice")
        seen[key] = value
    return seen


def _check_depth(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise BodyRefused(400, "too_deep", f"the JSON body nests deeper than {MAX_DEPTH} levels")
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in children:
        _check_depth(item, depth + 1)


def check_json(raw: bytes) -> None:
    try:
        parsed = json.loads(raw, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise BodyRefused(400, "too_deep", f"the JSON body nests deeper than {MAX_DEPTH} levels")
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, BodyRefused):
            raise
        raise BodyRefused(400, "invalid_json", f"the body is not valid JSON ({exc})")
    _check_depth(parsed)


def check_query_and_headers(scope: Scope) -> None:
    """NUL cannot reach Postgres from a query parameter or a header either."""
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            raise BodyRefused(422, "invalid_text", f"query parameter {name[:40]!r} contains the "
                              "NUL character, which cannot be stored")
    for name, value in scope["headers"]:
        if b"\x00" in value:
            raise BodyRefused(422, "invalid_text", f"header {name.decode('latin-1')!r} contains "
                              "the NUL character")


class BodyGuard:
    """ASGI middleware for the /v1 routes."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, budget: BodyBudget) -> None:
        self.app, self.max_bytes, self.budget = app, max_bytes, budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            check_query_and_headers(scope)
        except BodyRefused as refused:
            await _send_error(send, refused)
            return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        size = self._reservation(scope)
        if not self.budget.take(size):
            await _send_error(send, BodyRefused(
                503, "busy", "the API is reading too many request bodies at once; try again "
                "in a second", retry_after=1))
            return
        try:
            try:
                body = await self._read(scope, receive)
                if body:
                    _require_json(scope)
                    check_json(body)
            except BodyRefused as refused:
                await _send_error(send, refused)
                return
            await self.app(scope, replay(body), send)
        finally:
            self.budget.give(size)

    def _reservation(self, scope: Scope) -> int:
        """What the body may take: its declared length, the most allowed when it is sent in
        chunks, nothing when there is none; never more than the whole budget, so a body the
        size limit allows always gets its turn."""
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit():
            size = min(int(declared), self.max_bytes)
        else:
            size = self.max_bytes if b"transfer-encoding" in headers else 0
        return min(size, self.budget.total)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise _too_large(self.max_bytes)
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:  # also covers chunked bodies without a length
                raise _too_large(self.max_bytes)
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)


def _too_large(limit: int) -> BodyRefused:
    return BodyRefused(413, "body_too_large", f"the body is larger than {limit:,} bytes")


def _require_json(scope: Scope) -> None:
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise BodyRefused(415, "unsupported_media_type",
                          "send the body as JSON with Content-Type: application/json")


def replay(body: bytes) -> Receive:
    """A receive that gives the already-read body once, then a disconnect: for an app behind a
    middleware that had to read the body itself."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


async def _send_error(send: Send, refused: BodyRefused) -> None:
    payload = json.dumps({"error": refused.code, "message": refused.message}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if refused.retry_after is not None:
        headers.append((b"retry-after", str(refused.retry_after).encode()))
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
