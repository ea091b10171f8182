"""One error family for tickwork. Each error says what happened, to which id, and what to do."""

from __future__ import annotations

from typing import Any


class TickworkError(Exception):
    """Base error. ``code`` is machine-readable; the message is a sentence for a person."""

    code = "error"
    http_status = 400

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def as_body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.fields}


class NotFound(TickworkError):
    code = "not_found"
    http_status = 404

    def __init__(self, kind: str, object_id: object, hint: str = "") -> None:
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{kind} {object_id} does not exist{tail}")


class Conflict(TickworkError):
    code = "conflict"
    http_status = 409


class InvalidInput(TickworkError):
    code = "invalid_input"
    http_status = 422

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None,
                 **fields: Any) -> None:
        if code:
            self.code = code
        if field:
            fields["field"] = field
        super().__init__(message, **fields)


class Unauthorized(TickworkError):
    code = "unauthorized"
    http_status = 401


class Forbidden(TickworkError):
    code = "forbidden"
    http_status = 403


class NotAcceptable(TickworkError):
    code = "not_acceptable"
    http_status = 406
