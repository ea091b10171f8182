"""What query_file's SQL may do: an authorizer that allows only the functions a data question
needs and reads of ``result``, SQLite's own limits, and bounded stand-ins for the functions that
build huge values. Standard library only (it runs in the query child, worker/tools/sqlbox.py).

These refuse early and with a sentence; what no rule here can bound (one instr() call over a
long string) is bounded by the child's time, CPU and memory limits.
"""

from __future__ import annotations

import os
import re
import sqlite3

TYPE_CHECKING = False  # importing typing would slow the child's start-up, once per query
if TYPE_CHECKING:
    from typing import Any, Callable

MAX_FORMAT_WIDTH = 1000  # printf/format width and precision (%.*c repeats a character)
MAX_BLOB_BYTES = 1024  # randomblob()/zeroblob()
# The longest SQL query_file accepts. Checked before anything parses it (worker/walls.py reads
# its shape): a parser costs time that grows faster than the text does.
MAX_SQL_LENGTH = 100_000

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

_FORMAT_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?(?:ll|l)?(.)?", re.DOTALL)


def lock_down(db: sqlite3.Connection, *, length_limit: int, heap_limit: int = 0) -> list[str]:
    """Make db read-only and bounded; returns the list the refusals' sentences are added to."""
    # Declare the JSON table-valued functions now: declaring one later reads and writes
    # sqlite_master, which the authorizer refuses.
    db.execute("SELECT * FROM json_each('[]'), json_tree('[]')").fetchall()
    db.execute("PRAGMA query_only = ON")
    db.execute("PRAGMA temp_store = MEMORY")  # sorts stay in memory, under the heap limit
    if heap_limit:
        db.execute(f"PRAGMA hard_heap_limit = {int(heap_limit)}")
    for limit, value in _sqlite_limits(length_limit).items():
        db.setlimit(limit, value)
    refusals: list[str] = []
    _bounded_functions(db, length_limit, refusals)
    db.set_authorizer(_authorizer(refusals))
    return refusals


def _sqlite_limits(length_limit: int) -> dict[int, int]:
    return {sqlite3.SQLITE_LIMIT_LENGTH: length_limit,
            sqlite3.SQLITE_LIMIT_SQL_LENGTH: MAX_SQL_LENGTH,
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


def _bounded_functions(db: sqlite3.Connection, length_limit: int, refusals: list[str]) -> None:
    """printf/format, randomblob and zeroblob replaced by versions that refuse huge sizes.
    (The length limit caps them anyway; this refuses early, with a sentence.)"""
    helper = sqlite3.connect(":memory:")  # computes the real printf once the format is checked
    helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length_limit)

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
