"""Benchmark of the minute tick: the real ``dispatch_due`` against a bare claim-and-advance floor.

Run from the repo root:  .venv/bin/python bench/tick.py  [--schedules N] [--due N] [--repeat N]
                         [--explain] [--after-checkpoint]

The database is TICKWORK_DATABASE_URL when set (a scratch database ``tickwork_bench_tick`` is
created on that server and dropped at the end), else an embedded Postgres in a fresh /tmp folder.
The big data set (default 1,000,000 schedules, 10,000 of them due at the fixed tick time T) and
a small one (a tenth of it, the same number due) are loaded in turn. For each, the tick and the
floor are measured alternately, ``--repeat`` times per batch size, from the same reset state:

- tick:  ``dispatch_due(pool, now=T, batch_size=B, missed_limit=1440)`` -- claim, plan, insert
         executions + queue tasks, advance next_run, one transaction per batch, batches in
         ``LANES`` (2) at once.
- floor: the least any SKIP LOCKED dispatcher must do -- the same due scan with FOR UPDATE SKIP
         LOCKED and an UPDATE of next_run on the claimed ids, one transaction per batch, one
         batch at a time (the goal's floor: ``ratio``).
- floor_lanes: the same floor with its batches in as many lanes as the tick's
         (``ratio_vs_floor_in_lanes``: what the tick costs over the floor, like for like).

Each run is verified (every due row handled; for the tick one execution and one queue task each)
and reports its wall time, the WAL it wrote (own records, no full-page images, with
pg_walinspect) and its CPU: this Python process's, and that of the pool's Postgres backends
(from /proc, so when the server runs on this host). Between runs the due rows are put back, what the
run wrote is deleted, and the tables are vacuumed. ``--explain`` prints EXPLAIN ANALYZE of the
tick's first batch; ``--after-checkpoint`` makes every run pay full-page writes.

Readable lines go to stdout as it runs; the very last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Awaitable, Callable, NamedTuple
from uuid import UUID

import psycopg
import structlog
from croniter import croniter
from psycopg import sql as pgsql
from psycopg_pool import AsyncConnectionPool

# DueSchedule, plan_batch and batch_params: --explain builds a batch's parameters exactly as
# dispatch_once does.
from scratch import describe_server, process_cpu_s, say, scratch_database  # bench/scratch.py
from tickwork.scheduler import dispatcher
from tickwork.scheduler.dispatcher import batch_params, dispatch_due, in_lanes
from tickwork.scheduler.planner import CronCache, DueSchedule, plan_batch
from tickwork.sql import QUERIES
from tickwork.sql.db import open_pool
from tickwork.sql.ids import new_id, new_id_text
from tickwork.sql.migrate import migrate
from tickwork.runtime import settle_after_start_up

SCRATCH_DB = "tickwork_bench_tick"
APPLICATION_NAME = "tickwork-bench-tick"  # the measured pool's sessions, found by this name
# The fixed tick time: Monday 1 September 2025, midnight UTC, so that minutely, hourly, daily,
# weekly (Monday), weekday and monthly (the 1st) crons all have an aligned fire exactly at T.
T = datetime(2025, 9, 1, 0, 0, tzinfo=timezone.utc)
MISSED_LIMIT = 1440
BATCH_SIZES = (1000, 5000)
HEADLINE_BATCH = 1000
# Crons of the due schedules, all firing at T. An agent gets several of them (never the same one
# twice: schedules are unique per (agent, cron)); rotating the start by agent keeps the mix even.
DUE_CRONS = (
    "* * * * *", "*/5 * * * *", "*/15 * * * *", "0 * * * *", "*/10 * * * *", "0 */6 * * *",
    "0 0 * * *", "0 0 * * 1", "0 0 1 * *", "0 0 * * 1-5", "*/30 * * * *", "0 */2 * * *",
)
# Not-due schedules are daily crons "m h * * *" at minute-of-day 1..1439 (minute 0 is "0 0 * * *",
# a due cron), so an agent holds at most this many of them.
DAILY_SLOTS = 1439

FLOOR_CLAIM = """SELECT id FROM schedules
                  WHERE status = 'active' AND next_run <= %(now)s
                  ORDER BY next_run LIMIT %(limit)s
                    FOR UPDATE SKIP LOCKED"""
FLOOR_ADVANCE = """UPDATE schedules SET next_run = next_run + interval '1 day'
                    WHERE id = ANY(%(ids)s)"""


# --- the data -------------------------------------------------------------------------------

def agent_count(schedules: int, due: int, wanted: int) -> int:
    """Enough agents that every (agent, cron) pair stays unique."""
    return max(wanted, math.ceil(due / len(DUE_CRONS)), math.ceil((schedules - due) / DAILY_SLOTS))


def schedule_spec(index: int, due: int, agents: int) -> tuple[int, str, datetime]:
    """(agent number, cron, next_run) of schedule number ``index``; the first ``due`` are due."""
    if index < due:
        agent = index % agents
        return agent, DUE_CRONS[(index // agents + agent) % len(DUE_CRONS)], T
    k = index - due
    agent, slot = k % agents, k // agents
    minute_of_day = 1 + (agent + slot) % DAILY_SLOTS  # spreads next_run over the next 24 hours
    cron = f"{minute_of_day % 60} {minute_of_day // 60} * * *"
    return agent, cron, T + timedelta(minutes=minute_of_day)


def load(conn: psycopg.Connection, schedules: int, due: int, agents: int) -> list[UUID]:
    """Replace all data with one tenant, ``agents`` agents and ``schedules`` schedules; return
    the ids of the due ones."""
    conn.execute("TRUNCATE tenants, agents, schedules, executions, queue_tasks, skipped_fires"
                 " CASCADE")
    tenant_id = new_id()
    conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'bench')", (tenant_id,))
    agent_ids = [new_id() for _ in range(agents)]
    with conn.cursor().copy("COPY agents (id, tenant_id, name) FROM STDIN") as copy:
        for n, agent_id in enumerate(agent_ids):
            copy.write_row((agent_id, tenant_id, f"agent-{n}"))
    # Shuffled so the due rows are scattered over the heap as in a table built up over time,
    # not packed into the first pages; ids are minted in heap order, as UUIDv7 would be.
    order = list(range(schedules))
    random.Random(42).shuffle(order)
    due_ids: list[UUID] = []
    columns = "id, tenant_id, agent_id, cron, next_run, overlap"
    with conn.cursor().copy(f"COPY schedules ({columns}) FROM STDIN") as copy:
        for index in order:
            agent, cron, next_run = schedule_spec(index, due, agents)
            schedule_id = new_id()
            if index < due:
                due_ids.append(schedule_id)
            # overlap='skip' (the default) keeps the unfinished-run lookup in the measured path;
            # every reset deletes all executions, so none is unfinished and all due rows fire.
            copy.write_row((schedule_id, tenant_id, agent_ids[agent], cron, next_run, "skip"))
    conn.commit()
    return due_ids


def check_due_crons() -> None:
    for expression in DUE_CRONS:
        if not croniter.match(expression, T):
            raise SystemExit(f"bench bug: {expression!r} does not fire at {T}")


def load_dataset(url: str, schedules: int, due: int, agents: int) -> list[UUID]:
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        due_ids = load(conn, schedules, due, agents)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # statistics for the planner and a set visibility map
        _checkpoint(conn)
    say(f"loaded {schedules:,} schedules ({due:,} due at {T:%Y-%m-%d %H:%M} UTC) for {agents:,} "
        f"agents in {time.perf_counter() - started:.1f} s")
    return due_ids


# --- reset and verification -------------------------------------------------------------------

def reset(conn: psycopg.Connection, due_ids: list[UUID], *, checkpoint_last: bool) -> None:
    """Put the due rows back to due and remove what the last run wrote, then clean up after it,
    so every measurement starts from the same state (no dead tuples, fresh statistics).

    A checkpoint comes first, so none (timed or forced by WAL volume) lands inside the run; the
    reset's own writes then log the full-page images of the pages the run will touch. With
    ``checkpoint_last`` it comes last instead: the run pays those full-page writes itself, as a
    tick right after a checkpoint does (the worst case; both tick and floor pay them)."""
    if not checkpoint_last:
        _checkpoint(conn)
    conn.execute("UPDATE schedules SET next_run = %s, last_run = NULL WHERE id = ANY(%s)",
                 (T, due_ids))
    for table in ("executions", "queue_tasks", "skipped_fires"):
        conn.execute(pgsql.SQL("DELETE FROM {}").format(pgsql.Identifier(table)))
    conn.execute("VACUUM ANALYZE schedules, executions, queue_tasks, skipped_fires")
    if checkpoint_last:
        _checkpoint(conn)


def _checkpoint(conn: psycopg.Connection) -> None:
    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        pass  # not a superuser on a shared server: measurements are just a little noisier


def counts(conn: psycopg.Connection) -> dict[str, int]:
    query = """SELECT (SELECT count(*) FROM executions) AS executions,
                      (SELECT count(*) FROM queue_tasks) AS queue_tasks,
                      (SELECT count(*) FROM schedules WHERE status = 'active' AND next_run <= %s)
                          AS still_due"""
    row = conn.execute(query, (T,)).fetchone()
    return {"executions": row[0], "queue_tasks": row[1], "still_due": row[2]}


def verify(conn: psycopg.Connection, kind: str, due: int, handled: int) -> None:
    """Fail loudly unless the run handled every due row (and, for the tick, wrote one execution
    and one queue task each): a fast wrong tick is not a result."""
    found = counts(conn)
    wanted = {"executions": due if kind == "tick" else 0,
              "queue_tasks": due if kind == "tick" else 0, "still_due": 0}
    if found != wanted or handled != due:
        raise SystemExit(f"{kind} run is wrong: handled {handled} of {due}; found {found}, "
                         f"wanted {wanted}")


# --- the two measured operations --------------------------------------------------------------

async def run_tick(pool: AsyncConnectionPool, batch: int) -> int:
    result = await dispatch_due(pool, now=T, batch_size=batch, missed_limit=MISSED_LIMIT)
    if result.created != result.claimed:
        raise SystemExit(f"tick claimed {result.claimed} but created {result.created}")
    return result.created


async def run_floor(pool: AsyncConnectionPool, batch: int, lanes: int = 1) -> int:
    """The same loop shape as dispatch_due: batches until one comes back short (in each lane)."""
    handled = 0

    async def one_batch() -> bool:
        nonlocal handled
        async with pool.connection() as conn:
            claimed = await _floor_once(conn, batch)
        handled += claimed
        return claimed == batch

    await in_lanes(lanes, one_batch)
    return handled


async def run_floor_in_lanes(pool: AsyncConnectionPool, batch: int) -> int:
    return await run_floor(pool, batch, lanes=dispatcher.LANES)


async def _floor_once(conn: psycopg.AsyncConnection, batch: int) -> int:
    async with conn.transaction():
        cursor = await conn.execute(FLOOR_CLAIM, {"now": T, "limit": batch})
        ids = [row["id"] for row in await cursor.fetchall()]
        if ids:
            await conn.execute(FLOOR_ADVANCE, {"ids": ids})
    return len(ids)


RUNNERS: dict[str, Callable[[AsyncConnectionPool, int], Awaitable[int]]] = {
    "tick": run_tick, "floor": run_floor, "floor_lanes": run_floor_in_lanes}
KINDS = tuple(RUNNERS)


class Run(NamedTuple):
    """One measured run: wall time, WAL, and CPU of this Python process and of the pool's
    Postgres backends (None when /proc cannot tell, e.g. a server on another host)."""
    ms: float
    wal_mb: float
    python_cpu_ms: float
    backend_cpu_ms: float | None


Timings = dict[tuple[str, int], list[Run]]  # (kind, batch) -> runs


async def measure_dataset(url: str, label: str, due_ids: list[UUID], args: argparse.Namespace
                          ) -> Timings:
    """Time tick and floor ``repeat`` times per batch size, alternating which goes first so that
    drift on a noisy machine lands on both."""
    timings: Timings = defaultdict(list)
    pool = await open_pool(url, application_name=APPLICATION_NAME, min_size=1,
                           max_size=max(2, dispatcher.LANES))
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            for rep in range(args.repeat):
                order = KINDS if rep % 2 == 0 else KINDS[::-1]
                for batch in BATCH_SIZES:
                    for kind in order:
                        reset(admin, due_ids, checkpoint_last=args.after_checkpoint)
                        run = await _measure_one(pool, admin, kind, batch, len(due_ids))
                        timings[(kind, batch)].append(run)
                        say(f"  {label}  rep {rep + 1}/{args.repeat}  {kind:<5}  batch {batch:>5}:"
                            f" {run.ms:8.1f} ms  {run.wal_mb:6.1f} MB WAL  CPU python "
                            f"{run.python_cpu_ms:6.0f} ms, backend {_ms(run.backend_cpu_ms)}")
    finally:
        await pool.close()
    return timings


async def _measure_one(pool: AsyncConnectionPool, admin: psycopg.Connection, kind: str,
                       batch: int, due: int) -> Run:
    """Wall time of one run, the WAL it wrote (see own_wal_bytes: without full-page images
    when pg_walinspect is there, so --after-checkpoint then shows its cost in time only) and
    the CPU it cost on each side of the connection."""
    lsn_before = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    backends_before = backend_cpu_s(admin)
    python_before = time.process_time()
    started = time.perf_counter()
    handled = await RUNNERS[kind](pool, batch)
    elapsed_ms = (time.perf_counter() - started) * 1000
    python_ms = (time.process_time() - python_before) * 1000
    backend_ms = _cpu_delta_ms(backends_before, backend_cpu_s(admin))
    # Flushed, not inserted: pg_walinspect reads only flushed WAL, and the run's own records
    # are all flushed by its synchronous commits.
    lsn_after = admin.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
    verify(admin, kind, due, handled)
    return Run(elapsed_ms, own_wal_bytes(admin, lsn_before, lsn_after) / 1e6, python_ms,
               backend_ms)


def backend_cpu_s(admin: psycopg.Connection) -> dict[int, float | None]:
    """CPU seconds so far of each backend serving the bench's pool (by application name), read
    from /proc: the server must run on this host."""
    pids = [row[0] for row in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database()", (APPLICATION_NAME,))]
    return {pid: process_cpu_s(pid) for pid in pids}


def _cpu_delta_ms(before: dict[int, float | None], after: dict[int, float | None]
                  ) -> float | None:
    """CPU the backends spent between the two readings; a backend started meanwhile counts
    from zero (its start is part of the run)."""
    if not after or any(v is None for v in after.values()):
        return None
    return sum(cpu - (before.get(pid) or 0.0) for pid, cpu in after.items()) * 1000


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:6.0f} ms"


def own_wal_bytes(admin: psycopg.Connection, start: str, end: str) -> float:
    """WAL the run wrote, without full-page images, when pg_walinspect can tell.

    On a shared server the LSN difference also counts what other databases wrote meanwhile, and
    a CHECKPOINT requested by anyone makes the run's next change to each page log a full image
    (seen: 17 MB ticks reported as 75-120 MB). So only records touching this database's
    relations are summed, less their full-page images: the bytes that grow with the work per
    row, comparable run to run. Else the LSN difference."""
    if _has_walinspect(admin):
        try:
            return float(admin.execute(
                """SELECT coalesce(sum(record_length - fpi_length), 0)
                     FROM pg_get_wal_records_info(%s, %s)
                    WHERE block_ref LIKE '%%/' || (SELECT oid FROM pg_database
                                                   WHERE datname = current_database()) || '/%%'
                """, (start, end)).fetchone()[0])
        except psycopg.Error as exc:  # e.g. a segment already recycled: say so, use the diff
            say(f"  (pg_walinspect failed: {exc}; WAL figure is the LSN difference)")
    return float(admin.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()[0])


_WALINSPECT: dict[int, bool] = {}


def _has_walinspect(admin: psycopg.Connection) -> bool:
    key = id(admin)
    if key not in _WALINSPECT:
        try:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            _WALINSPECT[key] = True
        except psycopg.Error:
            _WALINSPECT[key] = False  # not available or not allowed: the LSN difference it is
    return _WALINSPECT[key]


# --- where the time goes (--explain) -----------------------------------------------------

def explain_first_batch(url: str, due_ids: list[UUID], batch: int) -> None:
    """Print EXPLAIN ANALYZE of the tick's two statements for its first batch, built by the same
    functions dispatch_once uses, then roll back: the plans show which joins grow with the table."""
    with psycopg.connect(url, autocommit=True) as admin:
        reset(admin, due_ids, checkpoint_last=False)
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        claim = {"now": T, "limit": batch}
        _print_plan(conn, "claim_due_schedules", QUERIES["claim_due_schedules"], claim)
        rows = conn.cursor(row_factory=psycopg.rows.args_row(DueSchedule)).execute(
            QUERIES["claim_due_schedules"], claim).fetchall()
        plans = plan_batch(rows, CronCache(), new_id=new_id_text, missed_limit=MISSED_LIMIT)
        _print_plan(conn, "update_claimed_schedules", QUERIES["update_claimed_schedules"], batch_params(plans))
        conn.rollback()


def _print_plan(conn: psycopg.Connection, name: str, query: str, params: dict) -> None:
    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, WAL) " + query, params).fetchall()
    say(f"--- EXPLAIN ANALYZE {name}")
    for row in rows:
        say("    " + row["QUERY PLAN"])


# --- reporting ------------------------------------------------------------------------------

def summarize(label: str, timings: Timings) -> dict[str, float]:
    """Median and min per (kind, batch); prints one line per batch size."""
    figures: dict[str, float] = {}
    for batch in BATCH_SIZES:
        for kind in KINDS:
            runs = timings[(kind, batch)]
            figures[f"{kind}_{batch}"] = round(statistics.median(r.ms for r in runs), 1)
            figures[f"{kind}_min_{batch}"] = round(min(r.ms for r in runs), 1)
            figures[f"{kind}_wal_mb_{batch}"] = round(statistics.median(r.wal_mb for r in runs), 1)
            figures[f"{kind}_python_cpu_ms_{batch}"] = round(
                statistics.median(r.python_cpu_ms for r in runs))
            backend = [r.backend_cpu_ms for r in runs]
            figures[f"{kind}_backend_cpu_ms_{batch}"] = (
                None if None in backend else round(statistics.median(backend)))
        figures[f"ratio_{batch}"] = round(figures[f"tick_{batch}"] / figures[f"floor_{batch}"], 2)
        figures[f"ratio_lanes_{batch}"] = round(
            figures[f"tick_{batch}"] / figures[f"floor_lanes_{batch}"], 2)
        say(f"{label} batch {batch}: tick median {figures[f'tick_{batch}']} ms "
            f"(min {figures[f'tick_min_{batch}']}, {figures[f'tick_wal_mb_{batch}']} MB WAL), "
            f"floor median {figures[f'floor_{batch}']} ms (min {figures[f'floor_min_{batch}']}, "
            f"{figures[f'floor_wal_mb_{batch}']} MB WAL), tick/floor {figures[f'ratio_{batch}']}x")
        say(f"{label} batch {batch}: floor in {dispatcher.LANES} lanes median "
            f"{figures[f'floor_lanes_{batch}']} ms, "
            f"tick/that floor {figures[f'ratio_lanes_{batch}']}x")
        say(f"{label} batch {batch}: CPU median, python/backend: tick "
            f"{figures[f'tick_python_cpu_ms_{batch}']}/{figures[f'tick_backend_cpu_ms_{batch}']} ms,"
            f" floor {figures[f'floor_python_cpu_ms_{batch}']}/"
            f"{figures[f'floor_backend_cpu_ms_{batch}']} ms")
    return figures


def final_json(args: argparse.Namespace, small: int, big: dict[str, float],
               little: dict[str, float]) -> dict[str, object]:
    b = HEADLINE_BATCH
    return {
        "tick_ms": big[f"tick_{b}"], "floor_ms": big[f"floor_{b}"], "ratio": big[f"ratio_{b}"],
        "tick_min_ms": big[f"tick_min_{b}"], "floor_min_ms": big[f"floor_min_{b}"],
        "tick_ms_100k": little[f"tick_{b}"], "floor_ms_100k": little[f"floor_{b}"],
        "ratio_100k": little[f"ratio_{b}"],
        "growth_1m_vs_100k": round(big[f"tick_{b}"] / little[f"tick_{b}"], 2),
        "floor_growth_1m_vs_100k": round(big[f"floor_{b}"] / little[f"floor_{b}"], 2),
        # The like-for-like floor: the same claim-and-advance in as many lanes as the tick.
        "floor_lanes_ms": big[f"floor_lanes_{b}"],
        "ratio_vs_floor_in_lanes": big[f"ratio_lanes_{b}"],
        "lanes": dispatcher.LANES,
        "tick_ms_batch5000": big["tick_5000"], "floor_ms_batch5000": big["floor_5000"],
        "ratio_batch5000": big["ratio_5000"],
        "tick_wal_mb": big[f"tick_wal_mb_{b}"], "floor_wal_mb": big[f"floor_wal_mb_{b}"],
        "tick_python_cpu_ms": big[f"tick_python_cpu_ms_{b}"],
        "tick_backend_cpu_ms": big[f"tick_backend_cpu_ms_{b}"],
        "floor_python_cpu_ms": big[f"floor_python_cpu_ms_{b}"],
        "floor_backend_cpu_ms": big[f"floor_backend_cpu_ms_{b}"],
        "load_1min": round(os.getloadavg()[0], 2),
        "due": args.due, "schedules": args.schedules, "schedules_small": small,
        "batch": b, "repeat": args.repeat, "collector": args.collector,
        "after_checkpoint": args.after_checkpoint,
        "server": "url" if os.environ.get("TICKWORK_DATABASE_URL") else "embedded",
    }


# --- main -----------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1_000_000,
                        help="schedules in the big data set (the small one holds a tenth)")
    parser.add_argument("--due", type=int, default=10_000, help="schedules due at the tick")
    parser.add_argument("--repeat", type=int, default=5, help="measurements of each kind")
    parser.add_argument("--collector", choices=("process", "default"), default="process",
                        help="the garbage collector as `tickwork scheduler` sets it after start-up "
                             "(tickwork.runtime.settle_after_start_up), or Python's defaults")
    parser.add_argument("--lanes", type=int, default=dispatcher.LANES,
                        help="batches the tick (and floor_lanes) keeps in flight; 1 is the tick "
                             "as it was before it had lanes")
    parser.add_argument("--agents", type=int, default=1_000, help="agents (at least)")
    parser.add_argument("--after-checkpoint", action="store_true",
                        help="checkpoint right before each run, so runs pay full-page writes")
    parser.add_argument("--explain", action="store_true",
                        help="also print EXPLAIN ANALYZE of the first tick batch per data set")
    args = parser.parse_args()
    if not 0 < args.due <= args.schedules // 10:
        parser.error("--due must be positive and at most a tenth of --schedules "
                     "(the small data set holds a tenth of them, all due ones included)")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.lanes < 1:
        parser.error("--lanes must be at least 1")
    return args


def bench_one(url: str, label: str, schedules: int, due: int, agents: int,
              args: argparse.Namespace) -> dict[str, float]:
    due_ids = load_dataset(url, schedules, due, agents)
    if args.explain:
        explain_first_batch(url, due_ids, HEADLINE_BATCH)
    timings = asyncio.run(measure_dataset(url, label, due_ids, args))
    return summarize(label, timings)


def main() -> None:
    args = parse_args()
    # Library logs (migrations, the embedded server) go to stderr: stdout ends with the JSON line.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    check_due_crons()
    dispatcher.LANES = args.lanes
    if args.collector == "process":  # as `tickwork scheduler` runs its ticks
        settle_after_start_up()
    say(f"garbage collector: {args.collector} (thresholds {gc.get_threshold()})")
    small = args.schedules // 10
    with scratch_database(SCRATCH_DB) as url:
        describe_server(url, ("shared_buffers", "synchronous_commit", "work_mem", "max_wal_size"))
        migrate(url)
        agents = agent_count(args.schedules, args.due, args.agents)
        big = bench_one(url, f"{args.schedules:,}", args.schedules, args.due, agents, args)
        little = bench_one(url, f"{small:,}", small, args.due,
                           agent_count(small, args.due, args.agents), args)
    growth = big[f"tick_{HEADLINE_BATCH}"] / little[f"tick_{HEADLINE_BATCH}"]
    say(f"tick with {args.schedules:,} vs {small:,} schedules (same {args.due:,} due): "
        f"{growth:.2f}x")
    print(json.dumps(final_json(args, small, big, little)), flush=True)


if __name__ == "__main__":
    main()
