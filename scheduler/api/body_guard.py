"""Refuse bad bodies before the framework parses them: size, content type, depth, duplicate
keys, NUL characters and lone surrogates (which Postgres cannot store). Each refusal is a JSON
error with a sentence; the buffered body is handed on unchanged when it passes."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_DEPTH = 32


class BodyRefused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise BodyRefused(400, "duplicate_key", f"the JSON body has the key {key[:50]!r} twice")
        seen[key] = value
    return seen


def _check_value(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise BodyRefused(400, "too_deep", f"the JSON body nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _check_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_value(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_value(item, depth + 1)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise BodyRefused(422, "invalid_text", "text may not contain the NUL character (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BodyRefused(422, "invalid_text", "text contains a lone UTF-16 surrogate, which is "
                          "not valid Unicode")


def check_json(raw: bytes) -> None:
    try:
        parsed = json.loads(raw, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise BodyRefused(400, "too_deep", f"the JSON body nests deeper than {MAX_DEPTH} levels")
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, BodyRefused):
            raise
        raise BodyRefused(400, "invalid_json", f"the body is not valid JSON ({exc})")
    _check_value(parsed)


class BodyGuard:
    """ASGI middleware for the /v1 routes."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
            if body:
                _require_json(scope)
                check_json(body)
        except BodyRefused as refused:
            await _send_error(send, refused)
            return
        await self.app(scope, _replay(body), send)

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


def _replay(body: bytes) -> Receive:
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
    await send({"type": "http.response.start", "status": refused.status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
