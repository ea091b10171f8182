"""The table ``result`` that query_file's SQL sees, built from a stored JSON value, and the
shape of an answer. Standard library only (it runs in the query child, worker/tools/sqlbox.py).
"""

from __future__ import annotations

import json
import sqlite3

TYPE_CHECKING = False  # importing typing would slow the child's start-up, once per query
if TYPE_CHECKING:
    from typing import Any


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


class AnswerTooLarge(ValueError):
    """Not even the first row fits in the answer's byte limit; the message says what to do."""


def answer(names: list[str], rows: list[tuple[Any, ...]], max_rows: int,
           max_bytes: int) -> dict[str, Any]:
    """The answer: at most max_rows rows, and only as many as fit in max_bytes of JSON, so what
    the worker takes in (and redacts, renders and stores) stays small whatever the SQL asks."""
    kept, size = [], 0
    for row in rows[:max_rows]:
        cells = [v.hex() if isinstance(v, bytes) else v for v in row]
        size += len(json.dumps(cells, ensure_ascii=False, default=str).encode()) + 1
        if size > max_bytes:
            break
        kept.append(cells)
    if rows and not kept:
        raise AnswerTooLarge(f"the first row alone is larger than the answer limit of "
                             f"{max_bytes:,} bytes; select fewer columns or shorter values "
                             "(substr)")
    answer: dict[str, Any] = {"columns": names, "rows": kept, "row_count": len(kept),
                              "truncated": len(kept) < len(rows)}
    if len(kept) < min(len(rows), max_rows):
        answer["note"] = (f"only the first {len(kept)} rows are shown: an answer is limited to "
                          f"{max_bytes:,} bytes; select fewer columns or shorter values "
                          "(substr), or page with LIMIT/OFFSET")
    elif answer["truncated"]:
        answer["note"] = (f"only the first {max_rows} rows are shown; aggregate, filter or page "
                          "with LIMIT/OFFSET to see the rest")
    return answer
