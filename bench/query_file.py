"""Benchmark of query_file's box: what one query costs as its own child process.

Run from the repo root:  .venv/bin/python bench/query_file.py [--calls N] [--records R]

No database: a stored result of R demo-like records is queried N times through
``worker.tools.sandbox.run_query`` (one fresh ``python -I -S sqlbox.py`` per call, as the worker
does), then N times in-process with ``worker.tools.sqlbox.query_rows`` (the same engine without
a process: the floor). Wall time per call (median, p90) and the children's CPU per call (user +
system, from getrusage) are printed; the last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time

from tickwork.worker.tools.sandbox import QueryLimits, run_query
from tickwork.worker.tools.sqlbox import query_rows

SQL = "SELECT category, count(*) AS n, max(id) FROM result GROUP BY 1 ORDER BY 2 DESC"


def records(count: int) -> list[dict]:
    return [{"id": i, "title": f"Record {i}", "category": ["invoice", "ticket", "lead"][i % 3],
             "body": f"Record {i} was opened on day {i % 28 + 1}; priority {i % 5}."}
            for i in range(1, count + 1)]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def boxed(text: str, calls: int) -> tuple[list[float], float]:
    walls, cpu_before = [], children_cpu()
    for _ in range(calls):
        started = time.perf_counter()
        await run_query(text, SQL, QueryLimits())
        walls.append(time.perf_counter() - started)
    return walls, (children_cpu() - cpu_before) / calls


def in_process(value: list[dict], calls: int) -> list[float]:
    walls = []
    for _ in range(calls):
        started = time.perf_counter()
        query_rows(value, SQL)
        walls.append(time.perf_counter() - started)
    return walls


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--records", type=int, default=500)
    args = parser.parse_args()
    value = records(args.records)
    text = json.dumps(value, separators=(",", ":"))
    walls, cpu = asyncio.run(boxed(text, args.calls))
    floor = in_process(value, args.calls)
    figures = {
        "calls": args.calls, "records": args.records, "stored_chars": len(text),
        "boxed_median_ms": ms(statistics.median(walls)),
        "boxed_p90_ms": ms(statistics.quantiles(walls, n=10)[-1]),
        "boxed_child_cpu_ms": ms(cpu),
        "in_process_median_ms": ms(statistics.median(floor))}
    print(f"{args.calls} calls over {args.records} records ({len(text)} chars stored)")
    print(f"in a child process: median {figures['boxed_median_ms']} ms, "
          f"p90 {figures['boxed_p90_ms']} ms, child CPU {figures['boxed_child_cpu_ms']} ms/call")
    print(f"in-process floor:   median {figures['in_process_median_ms']} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
