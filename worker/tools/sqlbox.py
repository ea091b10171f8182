"""The query_file engine: one stored result as the SQLite table ``result`` and one read-only
SELECT over it, locked down (authorizer, SQLite limits, progress handler).

Standard library only, on purpose: worker/tools/sandbox.py runs this file as its own process
(``python -I -S sqlbox.py CPU_SECONDS MEMORY_BYTES``), which sets its CPU-time and memory
limits before reading anything, and kills it at the time limit. Tests import it directly.

The child's protocol: stdin holds one JSON line (sql and limits), then the stored result's
JSON text. stdout gets ``ready`` once the table is loaded and locked down, then one JSON object,
``{"answer": …}`` or ``{"error": sentence, "stopped": null | "time" | "memory"}``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
TYPE_CHECKING = False  # importing typing would slow the child's start-up, once per query
if TYPE_CHECKING:
    from typing import Any, Callable

MAX_QUERY_ROWS = 200
QUERY_TIME_LIMIT_S = 2.0
MIN_LENGTH_LIMIT = 1_000_000  # bytes a string or blob may reach, however small the result
MAX_FORMAT_WIDTH = 1000  # printf/format width and precision (%.*c repeats a character)
MAX_BLOB_BYTES = 1024  # randomblob()/zeroblob()
_PROGRESS_EVERY = 1000  # VM instructions between deadline checks

# What a data question needs: aggregates and window functions, text, numbers, dates, JSON.
# Everything else is refused when the statement is prepared (load_extension, fts3_tokenizer,
# sqlite_* introspection …). printf/format, randomblob and zeroblob are bounded stand-ins.
ALLOWED_FUNCTIONS = frozenset("""
    avg count group_concat string_agg max min sum total
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    abs char coalesce concat concat_ws format glob hex ifnull iif instr length like likelihood
    likely lower ltrim nullif octet_length printf quote random randomblob replace round rtrim
    sign substr substring trim typeof unhex unicode unlikely upper zeroblob
    acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10
    log2 mod pi pow power radians sin sinh sqrt tan tanh trunc
    date time datetime julianday unixepoch strftime timediff current_date current_time
    current_timestamp
    json json_array json_array_length json_extract json_insert json_object json_patch
    json_remove json_replace json_set json_type json_valid json_quote json_group_array
    json_group_object json_error_position -> ->>
""".split())
# Tables a query may read: the result, and the JSON table-valued functions over its cells.
READABLE_TABLES = frozenset({"result", "json_each", "json_tree"})
_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                      sqlite3.SQLITE_RECURSIVE})

_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_READ_ONLY_START = re.compile(r"(?:select|with)\b", re.IGNORECASE)
_FORMAT_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?(?:ll|l)?(.)?", re.DOTALL)


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
                 length_limit: int = MIN_LENGTH_LIMIT, heap_limit: int = 0) -> None:
        self.max_rows, self.time_limit_s = max_rows, time_limit_s
        self.length_limit, self.heap_limit = length_limit, heap_limit


def length_limit_for(stored_bytes: int) -> int:
    """Strings may grow to about twice the stored result, never less than 1 MB: enough for any
    honest question, far too little for the 40-million-character strings of an attack."""
    return max(MIN_LENGTH_LIMIT, 2 * stored_bytes)


def check_select(sql: Any) -> None:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("sql must be one SELECT statement over the table result")
    start = _LEADING_NOISE.match(sql).end()  # type: ignore[union-attr]  # always matches
    if not _READ_ONLY_START.match(sql, start):
        raise QueryError("only one read-only SELECT (or WITH … SELECT) statement over the "
                         "table result is allowed")


def query_rows(value: Any, sql: str, box: Box | None = None) -> dict[str, Any]:
    """Load value into an in-memory table ``result`` and run one read-only SELECT over it
    (in this process: the sandbox runs this in a child it can kill)."""
    box = box or Box()
    check_select(sql)
    db = sqlite3.connect(":memory:")
    try:
        columns = load_table(db, value)
        refusals = lock_down(db, box)
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
    return _answer(names, rows, box.max_rows)


def lock_down(db: sqlite3.Connection, box: Box) -> list[str]:
    """Make db read-only and bounded; returns the list the refusals' sentences are added to."""
    # Declare the JSON table-valued functions now: declaring one later reads and writes
    # sqlite_master, which the authorizer refuses.
    db.execute("SELECT * FROM json_each('[]'), json_tree('[]')").fetchall()
    db.execute("PRAGMA query_only = ON")
    db.execute("PRAGMA temp_store = MEMORY")  # sorts stay in memory, under the heap limit
    if box.heap_limit:
        db.execute(f"PRAGMA hard_heap_limit = {int(box.heap_limit)}")
    for limit, value in _sqlite_limits(box).items():
        db.setlimit(limit, value)
    refusals: list[str] = []
    _bounded_functions(db, box, refusals)
    db.set_authorizer(_authorizer(refusals))
    return refusals


def _sqlite_limits(box: Box) -> dict[int, int]:
    return {sqlite3.SQLITE_LIMIT_LENGTH: box.length_limit,
            sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
            sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
            sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 100,
            sqlite3.SQLITE_LIMIT_VDBE_OP: 100_000,
            sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 100,
            sqlite3.SQLITE_LIMIT_ATTACHED: 0,
            sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1000,
            sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 0,
            sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0}


def _authorizer(refusals: list[str]) -> Callable[..., int]:
    def authorize(action: int, arg1: str | None, arg2: str | None, *_: Any) -> int:
        if action == sqlite3.SQLITE_FUNCTION and arg2 not in ALLOWED_FUNCTIONS:
            refusals.append(f"the SQL function {arg2}() is not allowed here; use ordinary "
                            "aggregate, text, math, date and JSON functions")
        elif action == sqlite3.SQLITE_READ and arg1 not in READABLE_TABLES and arg2 != "":
            # (An empty column name is a count of rows, as of a recursive CTE: no values read.)
            refusals.append(f"only the table result can be read, not {arg1}")
        elif action not in _ACTIONS:
            refusals.append("only reading the table result is allowed (no writes, ATTACH or "
                            "PRAGMA)")
        else:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    return authorize


def _bounded_functions(db: sqlite3.Connection, box: Box, refusals: list[str]) -> None:
    """printf/format, randomblob and zeroblob replaced by versions that refuse huge sizes.
    (The length limit caps them anyway; this refuses early, with a sentence.)"""
    helper = sqlite3.connect(":memory:")  # computes the real printf once the format is checked
    helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, box.length_limit)

    def refuse(sentence: str) -> None:
        refusals.append(sentence)
        raise ValueError(sentence)

    def printf(fmt: Any, *args: Any) -> Any:
        for size in _format_sizes(fmt, args):
            if abs(size) > MAX_FORMAT_WIDTH:
                refuse(f"printf/format widths and precisions are limited to {MAX_FORMAT_WIDTH} "
                       f"here, got {size}")
        marks = ", ".join("?" * (1 + len(args)))
        return helper.execute(f"SELECT printf({marks})", (fmt, *args)).fetchone()[0]

    def blob(name: str, make: Callable[[int], bytes]) -> Callable[[Any], bytes]:
        def bounded(size: Any) -> bytes:
            count = _as_int(size)
            if count > MAX_BLOB_BYTES:
                refuse(f"{name}() is limited to {MAX_BLOB_BYTES} bytes here, got {count}")
            return make(max(count, 1 if name == "randomblob" else 0))
        return bounded

    for name in ("printf", "format"):
        db.create_function(name, -1, printf)
    db.create_function("randomblob", 1, blob("randomblob", os.urandom))
    db.create_function("zeroblob", 1, blob("zeroblob", bytes))


def _format_sizes(fmt: Any, args: tuple[Any, ...]) -> list[int]:
    """The widths and precisions a printf format asks for (``*`` takes the next argument)."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("utf-8", "replace")
    if not isinstance(fmt, str):
        return []
    sizes, position = [], 0
    for spec in _FORMAT_SPEC.finditer(fmt):
        width, precision, kind = spec.groups()
        for part in (width, precision):
            if part == "*":
                sizes.append(_as_int(args[position]) if position < len(args) else 0)
                position += 1
            elif part:
                sizes.append(int(part))
        position += kind not in (None, "%")
    return sizes


def _as_int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0


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
              length_limit=header["length_limit"], heap_limit=header["heap_limit"])
    check_select(header["sql"])
    db = sqlite3.connect(":memory:")
    columns = load_table(db, json.loads(stdin.read()))
    refusals = lock_down(db, box)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv))
