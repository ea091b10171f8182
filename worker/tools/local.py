"""Local tools: run inside the worker, never metered.

``update_plan`` and ``task_complete`` are bookkeeping the stop gate reads; ``read_file`` and
``query_file`` reach results that were offloaded (worker/tools/offload.py) because they were
too large for the message history. Each returns a JSON-able value; bad input raises
ToolInputError, whose sentence goes back to the model so it can correct the call.

No transaction is held anywhere here: the stored result is fetched with one autocommit read,
and SQL over it runs in an in-memory SQLite database on a thread, with no Postgres involved.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection

from worker.tools.offload import OFFLOAD_THRESHOLD_CHARS, load_result, render_result


class ToolInputError(ValueError):
    """The model's arguments cannot be acted on; the message says why and what to do."""


PLAN_STATUSES = ("pending", "in_progress", "completed")
MAX_PLAN_STEPS = 50
MAX_STEP_TITLE = 300
MAX_QUERY_ROWS = 200
QUERY_TIME_LIMIT_S = 2.0


async def update_plan(plan_state: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Replace the run's plan; the stop gate refuses to stop while a step is not completed."""
    if not isinstance(steps, list) or len(steps) > MAX_PLAN_STEPS:
        raise ToolInputError(f"steps must be a list of at most {MAX_PLAN_STEPS} objects "
                             'like {"title": "…", "status": "pending"}')
    plan = [_plan_step(number, step) for number, step in enumerate(steps, start=1)]
    plan_state["steps"] = plan
    return {"ok": True, "open_steps": [s["title"] for s in plan if s["status"] != "completed"]}


def _plan_step(number: int, step: Any) -> dict[str, str]:
    if not isinstance(step, dict):
        raise ToolInputError(f'step {number} must be an object with "title" and "status"')
    title, status = step.get("title"), step.get("status")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_STEP_TITLE:
        raise ToolInputError(f"step {number} needs a title: text of 1 to {MAX_STEP_TITLE} "
                             "characters")
    if status not in PLAN_STATUSES:
        raise ToolInputError(f"step {number} ({title.strip()!r}) has status {status!r}; "
                             f"use one of {', '.join(PLAN_STATUSES)}")
    return {"title": title.strip(), "status": status}


async def task_complete(summary: str = "") -> dict[str, Any]:
    """Bookkeeping only: whether the run may stop is the gate's decision, not this call's."""
    if not isinstance(summary, str):
        raise ToolInputError("summary must be text")
    return {"ok": True}


async def read_file(conn: AsyncConnection, execution_id: UUID, file_ref: str, offset: int = 0,
                    limit: int = 4000, *,
                    max_chars: int = OFFLOAD_THRESHOLD_CHARS) -> dict[str, Any]:
    """A slice of a stored result's text. The slice is shortened so the whole reply renders
    within max_chars (pass the deployment's offload threshold): a reply that were itself
    offloaded would send the model in circles."""
    offset, limit = _whole(offset, "offset", 0), _whole(limit, "limit", 1)
    text = render_result((await _stored(conn, execution_id, file_ref))["content"])
    return text_slice(text, file_ref.strip(), offset, limit, max_chars=max_chars)


def text_slice(text: str, file_ref: str, offset: int, limit: int, *,
               max_chars: int = OFFLOAD_THRESHOLD_CHARS) -> dict[str, Any]:
    """read_file's reply: up to limit characters from offset, fewer if the reply (where JSON
    escaping lengthens the text) would otherwise render longer than max_chars."""
    if offset > len(text):
        raise ToolInputError(f"offset {offset} is past the end: {file_ref} has {len(text)} "
                             "characters")
    end = min(offset + limit, len(text))
    while True:
        reply = {"file_ref": file_ref, "offset": offset, "text": text[offset:end],
                 "total_chars": len(text), "next_offset": end if end < len(text) else None}
        over = len(render_result(reply)) - max_chars
        if over <= 0 or end - offset <= 1:
            return reply
        end = max(offset + 1, end - over)


async def query_file(conn: AsyncConnection, execution_id: UUID, file_ref: str, sql: str, *,
                     max_rows: int = MAX_QUERY_ROWS,
                     time_limit_s: float = QUERY_TIME_LIMIT_S) -> dict[str, Any]:
    """Run one read-only SELECT over a stored result, seen as the table ``result``."""
    if not isinstance(sql, str) or not sql.strip():
        raise ToolInputError("sql must be one SELECT statement over the table result")
    row = await _stored(conn, execution_id, file_ref)
    # SQLite is synchronous and a query may take its full time limit: keep the event loop free.
    return await asyncio.to_thread(query_rows, row["content"], sql, max_rows=max_rows,
                                   time_limit_s=time_limit_s)


async def _stored(conn: AsyncConnection, execution_id: UUID, file_ref: Any) -> dict[str, Any]:
    row = None
    if isinstance(file_ref, str):
        row = await load_result(conn, execution_id=execution_id, file_ref=file_ref.strip())
    if row is None:
        raise ToolInputError(f"no such file in this run: {str(file_ref)[:80]!r}; use a file_ref "
                             "returned by an offloaded result of this run")
    return row


def _whole(value: Any, name: str, minimum: int) -> int:
    # Models send numbers as 800, 800.0 or "800"; all mean the same offset.
    try:
        number = int(value) if not isinstance(value, bool) and float(value) == int(value) else None
    except (TypeError, ValueError, OverflowError):
        number = None
    if number is None or number < minimum:
        raise ToolInputError(f"{name} must be a whole number of at least {minimum}")
    return number


# --- SQL over a stored result: pure, synchronous, testable without Postgres ---------------

_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_READ_ONLY_START = re.compile(r"(?:select|with)\b", re.IGNORECASE)
# Everything else (writes, ATTACH, PRAGMA, CREATE …) is denied when the statement is prepared.
# (SELECT * FROM sqlite_master still works for a model that wants the table's definition.)
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ,
                              sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE})
_PROGRESS_EVERY = 1000  # VM instructions between deadline checks
_MAX_VALUE_BYTES = 50_000_000  # caps randomblob()/zeroblob()/printf() memory after loading


def query_rows(value: Any, sql: str, *, max_rows: int = MAX_QUERY_ROWS,
               time_limit_s: float = QUERY_TIME_LIMIT_S) -> dict[str, Any]:
    """Load value into an in-memory table ``result`` and run one read-only SELECT over it."""
    start = _LEADING_NOISE.match(sql).end()  # type: ignore[union-attr]  # always matches
    if not _READ_ONLY_START.match(sql, start):
        raise ToolInputError("only one read-only SELECT (or WITH … SELECT) statement over the "
                             "table result is allowed")
    db = sqlite3.connect(":memory:")
    try:
        columns = load_table(db, value)
        _lock_down(db, time_limit_s)
        try:
            cursor = db.execute(sql)
            rows = cursor.fetchmany(max_rows + 1)
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise ToolInputError(_explain(exc, columns, time_limit_s)) from None
        names = [d[0] for d in cursor.description or ()]
    finally:
        db.close()
    return _answer(names, rows, max_rows)


def _lock_down(db: sqlite3.Connection, time_limit_s: float) -> None:
    # Data first, then read-only: query_only and the authorizer refuse any write, ATTACH or
    # PRAGMA; the progress handler stops a runaway query (a huge cross join, a recursive CTE).
    db.execute("PRAGMA query_only = ON")
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
    db.set_authorizer(lambda action, *_: sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS
                      else sqlite3.SQLITE_DENY)
    deadline = time.monotonic() + time_limit_s
    db.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_EVERY)


def load_table(db: sqlite3.Connection, value: Any) -> list[str]:
    """Create ``result`` from a JSON value; return its column names.

    A list of objects is one row per object (columns: the union of keys, first seen first); a
    single object is one row; anything else (a list of scalars, a scalar) is one column value.
    """
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        keys = _column_names(value)
        rows = ([_cell(item.get(key)) for key in keys] for item in value)
    else:
        keys = {"value": "value"}
        rows = ([_cell(item)] for item in (value if isinstance(value, list) else [value]))
    columns = list(keys.values())
    db.execute(f"CREATE TABLE result ({', '.join(map(_quote, columns))})")
    db.executemany(f"INSERT INTO result VALUES ({', '.join('?' * len(columns))})", rows)
    return columns


def _column_names(items: list[dict[str, Any]]) -> dict[str, str]:
    # SQLite column names are case-insensitive: "Id" and "id" in the data become id and id_2.
    names: dict[str, str] = {}
    taken: set[str] = set()
    for item in items:
        for key in item:
            if key not in names:
                name = base = str(key) or "_"
                suffix = 2
                while name.lower() in taken:
                    name, suffix = f"{base}_{suffix}", suffix + 1
                taken.add(name.lower())
                names[key] = name
    return names


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)  # SQLite integers are 64-bit
    if value is None or isinstance(value, (str, float)):
        return value
    # Nested values as JSON text, so json_extract(column, '$.field') works on them.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _explain(exc: Exception, columns: list[str], time_limit_s: float) -> str:
    if str(exc) == "interrupted":
        return (f"the query ran longer than {time_limit_s:g} s and was stopped; filter, aggregate "
                "or add a LIMIT")
    if "not authorized" in str(exc) or "readonly" in str(exc):
        return "only reading the table result is allowed (no writes, ATTACH or PRAGMA)"
    return (f"SQLite error: {str(exc).rstrip('.')}. The table is named result; its columns are "
            f"{', '.join(columns)}")


def _answer(names: list[str], rows: list[tuple[Any, ...]], max_rows: int) -> dict[str, Any]:
    truncated = len(rows) > max_rows
    rows = rows[:max_rows]
    answer: dict[str, Any] = {
        "columns": names,
        "rows": [[v.hex() if isinstance(v, bytes) else v for v in row] for row in rows],
        "row_count": len(rows), "truncated": truncated}
    if truncated:
        answer["note"] = (f"only the first {max_rows} rows are shown; aggregate, filter or page "
                          "with LIMIT/OFFSET to see the rest")
    return answer
