"""Where Postgres spends its work per unit, read from pg_stat_statements: execution time, WAL
records and WAL bytes of every statement run in this database between ``reset`` and ``read``.

Only when the server loads the module (``shared_preload_libraries = 'pg_stat_statements'``);
elsewhere ``available`` says why not and the benches print no such figures. Execution time is
the server's own clock around each statement (not its commit, its parse or the round trip), so
it is a share of the backends' CPU, not all of it; WAL is what the statements wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from scratch import say

READ = """
SELECT calls, total_exec_time, rows, wal_records, wal_bytes,
       regexp_replace(query, '\\s+', ' ', 'g') AS query
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


@dataclass(frozen=True)
class Statement:
    calls: int
    exec_ms: float
    rows: int
    wal_records: int
    wal_bytes: int
    query: str


def available(url: str) -> str | None:
    """None when pg_stat_statements can be read here, else the reason it cannot."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
            conn.execute("SELECT count(*) FROM pg_stat_statements")
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return None


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def read(url: str, *, leave_out: tuple[str, ...] = ()) -> list[Statement]:
    """Every statement of this database since the last reset, most execution time first, but
    for those whose text holds one of ``leave_out`` (a bench's own polling, an enqueue that is
    not part of what is timed), the module's own and a bench's CHECKPOINT before it times."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(READ).fetchall()
    statements = [Statement(calls, exec_ms, n, wal_records, int(wal_bytes), query)
                  for calls, exec_ms, n, wal_records, wal_bytes, query in rows]
    kept = [s for s in statements if "pg_stat_statements" not in s.query
            and s.query != "CHECKPOINT" and not any(part in s.query for part in leave_out)]
    return sorted(kept, key=lambda s: s.exec_ms, reverse=True)


def per_unit(statements: list[Statement], units: int, label: str, unit: str,
             top: int = 4) -> dict[str, float]:
    """Print the top statements and the totals per unit (a run, a job); return the totals."""
    exec_us = 1000 * sum(s.exec_ms for s in statements) / units
    records = sum(s.wal_records for s in statements) / units
    wal = sum(s.wal_bytes for s in statements) / units
    say(f"{label}: Postgres executed {exec_us:.1f} us per {unit} and wrote {records:.1f} WAL "
        f"records ({wal:,.0f} bytes) per {unit} (pg_stat_statements)")
    for s in statements[:top]:
        say(f"  {1000 * s.exec_ms / units:6.1f} us, {s.wal_records / units:5.1f} WAL records "
            f"per {unit}; {s.calls:,} calls of {s.rows / max(s.calls, 1):.1f} rows: "
            f"{s.query[:90]}")
    return {"exec_us": round(exec_us, 1), "wal_records": round(records, 2),
            "wal_bytes": round(wal)}
