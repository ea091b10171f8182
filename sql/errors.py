"""One error family for tickwork. Each error says what happened, to which id, and what to do.

Which HTTP status an error answers with is the API's business (tickwork.scheduler.api.errors);
the CLI and the worker raise and read the same errors without it.
"""

from __future__ import annotations

from typing import Any


class TickworkError(Exception):
    """Base error. ``code`` is machine-readable; the message is a sentence for a person."""

    code = "error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def as_body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.fields}


class NotFound(TickworkError):
    code = "not_found"

    def __init__(self, kind: str, object_id: object, hint: str = "") -> None:
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{kind} {object_id} does not exist{tail}")


class Conflict(TickworkError):
    code = "conflict"


class InvalidInput(TickworkError):
    code = "invalid_input"

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None,
                 **fields: Any) -> None:
        if code:
            self.code = code
        if field:
            fields["field"] = field
        super().__init__(message, **fields)


class Unauthorized(TickworkError):
    code = "unauthorized"


class Forbidden(TickworkError):
    code = "forbidden"
