"""The query_file engine: one stored result as the SQLite table ``result`` and one read-only
SELECT over it, locked down (worker/tools/sqlguard.py) and stopped by a progress handler.

Standard library only, on purpose, like sqltable.py and sqlguard.py (and the two package
``__init__`` files, which must stay free of imports): worker/tools/sandbox.py runs ``main`` as
its own process (``python -I -S``), which sets its CPU-time and memory limits before reading
anything and is killed at the time limit. Tests call ``query_rows`` in-process.

The child's protocol: stdin holds one JSON line (sql and limits), then the stored result's
JSON text. stdout gets ``ready`` once the table is loaded and locked down, then one JSON object,
``{"answer": …}`` or ``{"error": sentence, "stopped": null | "time" | "memory"}``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import time

from .sqlguard import MAX_SQL_LENGTH, lock_down
from .sqltable import AnswerTooLarge, answer, load_table

TYPE_CHECKING = False  # importing typing would slow the child's start-up, once per query
if TYPE_CHECKING:
    from typing import Any

MAX_QUERY_ROWS = 200
# Bytes of JSON an answer may hold (rows past it are left out, and the answer says so): 200
# rows of 68,000 characters made a 13.6 MB answer that stalled the worker taking it in.
MAX_ANSWER_BYTES = 1_000_000
QUERY_TIME_LIMIT_S = 2.0
MIN_LENGTH_LIMIT = 1_000_000  # bytes a string or blob may reach, however small the result
_PROGRESS_EVERY = 1000  # VM instructions between deadline checks

_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_READ_ONLY_START = re.compile(r"(?:select|with)\b", re.IGNORECASE)


class QueryError(ValueError):
    """The query cannot be answered; the message says why and what to do. ``stopped`` names
    the limit that stopped it ("time", "memory", "cpu"), or is None for an ordinary error."""

    def __init__(self, message: str, stopped: str | None = None) -> None:
        super().__init__(message)
        self.stopped = stopped


class Box:
    """Limits applied inside SQLite. length_limit: bytes one string or blob may reach;
    heap_limit: bytes SQLite may allocate in all (0: no limit of its own). (A plain class:
    importing dataclasses would add a third to the child's start-up.)"""

    def __init__(self, max_rows: int = MAX_QUERY_ROWS, time_limit_s: float = QUERY_TIME_LIMIT_S,
                 length_limit: int = MIN_LENGTH_LIMIT, heap_limit: int = 0,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.max_rows, self.time_limit_s = max_rows, time_limit_s
        self.length_limit, self.heap_limit = length_limit, heap_limit
        self.max_answer_bytes = max_answer_bytes


def length_limit_for(stored_bytes: int) -> int:
    """Strings may grow to about twice the stored result, never less than 1 MB: enough for any
    honest question, far too little for the 40-million-character strings of an attack."""
    return max(MIN_LENGTH_LIMIT, 2 * stored_bytes)


def check_select(sql: Any) -> None:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("sql must be one SELECT statement over the table result")
    if len(sql) > MAX_SQL_LENGTH:
        raise QueryError(too_long(len(sql)))
    start = _LEADING_NOISE.match(sql).end()  # type: ignore[union-attr]  # always matches
    if not _READ_ONLY_START.match(sql, start):
        raise QueryError("only one read-only SELECT (or WITH … SELECT) statement over the "
                         "table result is allowed")


def too_long(length: int) -> str:
    """The refusal of SQL past MAX_SQL_LENGTH characters (also the query-loop wall's)."""
    return (f"its SQL is {length:,} characters long, and query_file accepts at most "
            f"{MAX_SQL_LENGTH:,} characters. Do not list every value: filter with a range, a "
            "LIKE or a subquery over result instead")


def query_rows(value: Any, sql: str, box: Box | None = None) -> dict[str, Any]:
    """Load value into an in-memory table ``result`` and run one read-only SELECT over it
    (in this process: the sandbox runs this in a child it can kill)."""
    box = box or Box()
    check_select(sql)
    db = sqlite3.connect(":memory:")
    try:
        columns = load_table(db, value)
        refusals = lock_down(db, length_limit=box.length_limit, heap_limit=box.heap_limit)
        return run_select(db, sql, columns, box, refusals)
    finally:
        db.close()


def run_select(db: sqlite3.Connection, sql: str, columns: list[str], box: Box,
               refusals: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + box.time_limit_s
    db.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_EVERY)
    try:
        cursor = db.execute(sql)
        rows = cursor.fetchmany(box.max_rows + 1)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        raise _explain(exc, columns, box, refusals) from None
    names = [d[0] for d in cursor.description or ()]
    try:
        return answer(names, rows, box.max_rows, box.max_answer_bytes)
    except AnswerTooLarge as exc:
        raise QueryError(str(exc)) from None


def _explain(exc: Exception, columns: list[str], box: Box, refusals: list[str]) -> QueryError:
    text = str(exc)
    if text == "interrupted":
        return QueryError(f"the query ran longer than {box.time_limit_s:g} s and was stopped; "
                          "filter, aggregate or add a LIMIT", "time")
    if refusals:  # the authorizer's or a bounded function's own sentence
        return QueryError(refusals[-1])
    if "not authorized" in text or "readonly" in text:
        return QueryError("only reading the table result is allowed (no writes, ATTACH or "
                          "PRAGMA)")
    if "out of memory" in text:
        return QueryError(f"the query needed more than {box.heap_limit // 2**20} MB of memory "
                          "and was stopped; filter, aggregate or add a LIMIT", "memory")
    if "too big" in text:
        return QueryError(f"a string or blob would grow past {box.length_limit} bytes (about "
                          "twice the stored result); work on shorter values")
    return QueryError(f"SQLite error: {text.rstrip('.')}. The table is named result; its "
                      f"columns are {', '.join(columns)}")


# --- the child process ---------------------------------------------------------------------

def _limit_self(cpu_seconds: int, memory_bytes: int) -> None:
    """Before any input is read: CPU time (SIGXCPU, then SIGKILL a second later), address
    space, no files written, no core dumps."""
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _serve(stdin: Any, stdout: Any) -> dict[str, Any]:
    header = json.loads(stdin.readline())
    box = Box(max_rows=header["max_rows"], time_limit_s=header["time_limit_s"],
              length_limit=header["length_limit"], heap_limit=header["heap_limit"],
              max_answer_bytes=header.get("max_answer_bytes", MAX_ANSWER_BYTES))
    check_select(header["sql"])
    db = sqlite3.connect(":memory:")
    columns = load_table(db, json.loads(stdin.read()))
    refusals = lock_down(db, length_limit=box.length_limit, heap_limit=box.heap_limit)
    stdout.write(b"ready\n")
    stdout.flush()
    return {"answer": run_select(db, header["sql"], columns, box, refusals)}


def main(argv: list[str]) -> int:
    _limit_self(int(argv[1]), int(argv[2]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        reply = _serve(stdin, stdout)
    except QueryError as exc:
        reply = {"error": str(exc), "stopped": exc.stopped}
        if exc.stopped == "memory":  # SQLite's heap limit: the parent names the process's limit
            reply["error"] = "memory"
    except MemoryError:
        reply = {"error": "memory", "stopped": "memory"}  # the parent writes the sentence
    except Exception as exc:  # not the query's fault: say what broke rather than die silently
        reply = {"error": f"the query could not run ({type(exc).__name__}: {exc})",
                 "stopped": None}
    stdout.write(json.dumps(reply, ensure_ascii=False).encode())
    stdout.flush()
    return 0
