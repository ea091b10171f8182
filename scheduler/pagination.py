"""Opaque list cursors: the last id of a page (ids are UUIDv7, so id order is creation order)."""

from __future__ import annotations

import base64
import binascii
from typing import Any
from uuid import UUID

from tickwork.sql.errors import InvalidInput

MAX_LIMIT = 200


def decode_cursor(cursor: str | None) -> UUID | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii") + b"=" * (-len(cursor) % 4))
        return UUID(bytes=raw)
    except (ValueError, UnicodeEncodeError, binascii.Error):
        raise InvalidInput("cursor is not one this API gave out; pass the previous page's "
                           "next_cursor unchanged", code="invalid_cursor", field="cursor")


def encode_cursor(last_id: UUID) -> str:
    return base64.urlsafe_b64encode(last_id.bytes).decode("ascii").rstrip("=")


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, got {limit}",
                           code="invalid_limit", field="limit")
    return limit


def page(rows: list[dict[str, Any]], limit: int, shape) -> dict[str, Any]:
    """Rows were fetched with limit + 1: the extra row only says another page exists."""
    items = rows[:limit]
    more = len(rows) > limit
    return {"items": [shape(row) for row in items],
            "next_cursor": encode_cursor(items[-1]["id"]) if more and items else None}
