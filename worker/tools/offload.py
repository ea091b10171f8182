"""Large tool results stay out of the message history.

A result is re-sent on every later turn of a run, so one over the threshold is stored in
``tool_results`` instead and the model gets a short preview plus a file reference it can read
in slices (``read_file``) or query with SQL (``query_file``). The threshold and preview size
are per-deployment settings, passed in by the caller; the constants are only defaults.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection

from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id

OFFLOAD_THRESHOLD_CHARS = 4000
PREVIEW_CHARS = 800
HINT = ("The full result is stored; read it with read_file(file_ref) or query it with "
        "query_file(file_ref, sql) where the table is named result.")


def render_result(value: Any) -> str:
    """The text a model sees for a tool result: compact JSON, dates and uuids as strings."""
    return json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False)


def storable(value: Any) -> Any:
    """The value as jsonb will hand it back: plain JSON types, object keys in jsonb's order
    (shorter first, then bytewise), no NUL characters (jsonb refuses them), NaN/Infinity as
    strings (not JSON at all). Rendering this gives exactly the text ``read_file`` serves later,
    so the preview and every slice agree on offsets."""
    return _jsonb_shape(json.loads(render_result(value), parse_constant=str))


def _jsonb_shape(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_jsonb_shape(item) for item in value]
    if isinstance(value, dict):
        items = [(_jsonb_shape(key), _jsonb_shape(item)) for key, item in value.items()]
        items.sort(key=lambda pair: (len(pair[0].encode()), pair[0].encode()))
        return dict(items)
    return value


def _rendered(value: Any, threshold: int) -> tuple[str, bool]:
    """(text, over the threshold); the text of a large result as it will be stored."""
    text = render_result(value)
    if len(text) <= threshold:
        return text, False
    return render_result(storable(value)), True


async def maybe_offload(conn: AsyncConnection, *, execution_id: UUID, tool: str, value: Any,
                        threshold: int = OFFLOAD_THRESHOLD_CHARS,
                        preview_chars: int = PREVIEW_CHARS) -> str:
    """The text the model sees for this result: the result itself when it is short, else a
    JSON reference to the stored result (one autocommit INSERT, no transaction held).
    Rendering runs in a thread: its time grows with the result, which a tool may make large."""
    text, large = await asyncio.to_thread(_rendered, value, threshold)
    if not large:
        return text
    file_ref = "f_" + new_id().hex
    await conn.execute(QUERIES["insert_tool_result"], {
        "file_ref": file_ref, "execution_id": execution_id, "tool": tool, "content": text,
        "chars": len(text)})
    return json.dumps({"offloaded": True, "file_ref": file_ref, "chars": len(text),
                       "preview": text[:preview_chars], "hint": HINT}, ensure_ascii=False)


async def load_result(conn: AsyncConnection, *, execution_id: UUID,
                      file_ref: str) -> dict[str, Any] | None:
    """The stored row (file_ref, tool, content, chars) if it belongs to this execution."""
    cursor = await conn.execute(QUERIES["get_tool_result"],
                                {"file_ref": file_ref, "execution_id": execution_id})
    return await cursor.fetchone()
