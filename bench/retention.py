"""Does retention keep up? Finished runs are created at the worker's best sustained rate while
retention ticks (the real scheduler.retention.trim_retention) drain a backlog of runs past the
horizon; prints deleted_per_s (a tick draining), created_per_s and ratio_delete_vs_create
(goal >= 10), taken on what one tick a minute deletes within its budget over the long run.

The database is TICKWORK_DATABASE_URL when set (a scratch database ``tickwork_bench_retention``
is created on that server and dropped at the end), else an embedded Postgres in a fresh /tmp
folder. Each run is shaped as a one-turn run leaves it: the execution, its claim and its five
journal events (run_start, step_start, content_delta, model_usage, run_complete). Ids are
UUIDv7 minted now. Where their events are is --journal:
  month     the bench makes the current month's partition, as a database older than a month
            has it (manage_journal_partitions made it ahead): retention leaves those events to
            the month's DROP, so a run costs its execution and claim;
  default   a database younger than a month as tickwork keeps it: one partition upkeep (the
            first tick after install) runs before the backlog is written. Before migration
            0055 that left the install month's events in the default partition, deleted row by
            row (the costly case); from 0055 the upkeep gives the month its own partition;
  upgraded  the backlog is written before any upkeep, so its events are in the default
            partition as in an install made before 0055; before the measured ticks, retention's
            partition upkeeps (trim_retention keeping everything) adopt that default as the
            month's partition, measured: the upkeeps it took, their time, and the slowest of a
            stream of journal appends (one every 5 ms) while they ran, beside the slowest
            before them.
Wall-clock rates move with whatever else the machine runs, so it also prints
pg_cpu_ms_per_1000_runs: the CPU retention's own Postgres backend spent per 1,000 runs deleted
(read from /proc when the server runs on this machine), the figure to compare across hours,
and one_core_ratio: the ratio that CPU per run allows when retention's backend has a core to
itself (a ceiling, not a measurement).
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import datetime, timedelta, timezone
from uuid import UUID

import psycopg
import structlog

from scratch import (busy_pct, describe_server, machine_cpu, process_cpu_s, say,  # bench/scratch.py
                     scratch_database)
from tickwork.scheduler.retention import trim_retention
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.tick import RETENTION_ENDS_BY_SECONDS
from tickwork.sql.db import open_pool
from tickwork.sql.ids import new_id
from tickwork.sql.migrate import migrate

# The worker's best sustained one-turn rate, measured by bench/runs.py on this machine class:
# 6,035 runs/s at --concurrency 64 (3,487-3,664 at its default 16), 2026-12-02 on a 2-core
# machine with the server on 127.0.0.1. (Until then this was 634/s, issue 9's first figure: the
# worker grew ten times faster and retention's budget had to follow it.)
DEFAULT_RATE = 6035.0
# What a one-turn run journals today (bench/runs.py counts 5 events per run).
EVENTS = ("run_start", "step_start", "content_delta", "model_usage", "run_complete")
APPLICATION = "bench-retention"  # the application_name of retention's pool
TICK_INTERVAL_S = 60.0  # the scheduler ticks once a minute (tickwork/processes.py)
EXECUTION_COLUMNS = ("id", "tenant_id", "agent_id", "trigger_type", "trigger_source",
                     "scheduled_for", "status", "outcome", "started_at", "finished_at")


def setup(url: str, journal: str) -> tuple[UUID, UUID]:
    migrate(url)
    tenant_id, agent_id = new_id(), new_id()
    with psycopg.connect(url) as conn:
        if journal == "month":  # what manage_journal_partitions made two months ago
            conn.execute(
                "CREATE TABLE run_events_bench_month PARTITION OF run_events FOR VALUES"
                " FROM (journal_month_bound(date_trunc('month', now() AT TIME ZONE 'UTC')"
                "       AT TIME ZONE 'UTC'))"
                " TO (journal_month_bound((date_trunc('month', now() AT TIME ZONE 'UTC')"
                "     + interval '1 month') AT TIME ZONE 'UTC'))")
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'bench')", (tenant_id,))
        conn.execute("INSERT INTO agents (id, tenant_id, name) VALUES (%s, %s, 'bench-agent')",
                     (agent_id, tenant_id))
        if journal == "upgraded":  # the months ahead, as the upkeep before 0055 made them
            for ahead in (1, 2):
                conn.execute(
                    f"CREATE TABLE run_events_bench_ahead_{ahead} PARTITION OF run_events FOR"
                    " VALUES FROM (journal_month_bound(date_trunc('month', now() AT TIME ZONE"
                    f" 'UTC') AT TIME ZONE 'UTC' + interval '{ahead} month'))"
                    " TO (journal_month_bound(date_trunc('month', now() AT TIME ZONE 'UTC')"
                    f" AT TIME ZONE 'UTC' + interval '{ahead + 1} month'))")
    if journal != "upgraded":  # a running database has had its partition upkeep
        asyncio.run(partition_upkeep(url))
    return tenant_id, agent_id


async def partition_upkeep(url: str, pool=None) -> float:
    """The partition part of a retention tick: trim_retention keeping everything (so it deletes
    nothing). Returns its seconds."""
    own = pool is None
    pool = pool or await open_pool(url, application_name=APPLICATION + "-upkeep", max_size=1)
    started = time.perf_counter()
    try:
        await trim_retention(pool, SchedulerSettings(retention_days=0), now=None)
    finally:
        if own:
            await pool.close()
    return time.perf_counter() - started


async def adopt_default(url: str) -> dict:
    """Partition upkeeps (at most 5) until the default partition holds no backlog event, while
    a journal append every 5 ms (one connection, as a worker's writer) times each append."""
    probe = new_id()  # this month's id: its events go where the backlog's do
    stop, times = asyncio.Event(), []

    async def appender() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            seq = 0
            while not stop.is_set():
                seq += 1
                sent = time.perf_counter()
                await conn.execute("INSERT INTO run_events (execution_id, seq, type)"
                                   " VALUES (%s, %s, 'step_start')", (probe, seq))
                times.append((sent, time.perf_counter() - sent))
                try:
                    await asyncio.wait_for(stop.wait(), 0.005)
                except asyncio.TimeoutError:
                    pass

    task = asyncio.create_task(appender())
    pool = await open_pool(url, application_name=APPLICATION + "-upkeep", max_size=1)
    await asyncio.sleep(1.0)  # appends with nothing else going on, for comparison
    started = time.perf_counter()
    upkeeps, adopted = [], False
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while len(upkeeps) < 5 and not adopted:
            upkeeps.append(round(await partition_upkeep(url, pool), 3))
            cur = await conn.execute("SELECT NOT EXISTS (SELECT 1 FROM run_events_default"
                                     " WHERE execution_id <> %s)", (probe,))
            adopted = (await cur.fetchone())[0]
        ended = time.perf_counter()
        await asyncio.sleep(0.2)
        stop.set()
        await task
        await pool.close()
        await conn.execute("DELETE FROM run_events WHERE execution_id = %s", (probe,))
    before = [s for t, s in times if t < started]
    during = [s for t, s in times if started <= t < ended]
    return {"adopted": adopted, "upkeeps_s": upkeeps, "s": round(ended - started, 3),
            "appends_during": len(during),
            "append_max_ms": round(1000 * max(during), 1) if during else None,
            "append_max_ms_before": round(1000 * max(before), 1) if before else None}


async def write_runs(conn: psycopg.AsyncConnection, tenant_id: UUID, agent_id: UUID, count: int,
                     finished: datetime) -> None:
    """``count`` finished one-turn runs in one transaction, by COPY."""
    ids = [new_id() for _ in range(count)]
    async with conn.transaction():
        cur = conn.cursor()
        async with cur.copy(f"COPY executions ({', '.join(EXECUTION_COLUMNS)}) FROM STDIN") as copy:
            for execution_id in ids:
                await copy.write_row((execution_id, tenant_id, agent_id, "run", "api", finished,
                                      "completed", "done", finished, finished))
        async with cur.copy("COPY execution_claims (execution_id, worker_id) FROM STDIN") as copy:
            for execution_id in ids:
                await copy.write_row((execution_id, "bench"))
        async with cur.copy("COPY run_events (execution_id, seq, type, payload) FROM STDIN") as copy:
            for execution_id in ids:
                for seq, kind in enumerate(EVENTS, 1):
                    await copy.write_row((execution_id, seq, kind, '{"text": "ok"}'))


async def seed_backlog(url: str, tenant_id: UUID, agent_id: UUID, backlog: int) -> float:
    """Runs that finished 40 days ago: past a 30-day horizon, retention's to delete."""
    started = time.perf_counter()
    old = datetime.now(timezone.utc) - timedelta(days=40)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for offset in range(0, backlog, 5000):
            await write_runs(conn, tenant_id, agent_id, min(5000, backlog - offset), old)
        await conn.execute("VACUUM ANALYZE executions")
        await conn.execute("VACUUM ANALYZE run_events")
        await conn.execute("VACUUM ANALYZE execution_claims")
    return time.perf_counter() - started


async def create_at_rate(url: str, tenant_id: UUID, agent_id: UUID, rate: float,
                         stop: asyncio.Event) -> int:
    """Finished runs (finished now: inside the horizon, never retention's) at ``rate`` per
    second, a slice every 100 ms, as the worker would finish them. Returns how many."""
    created, slice_s = 0, 0.1
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            due = int(rate * (time.perf_counter() - started + slice_s)) - created
            if due > 0:
                await write_runs(conn, tenant_id, agent_id, due, datetime.now(timezone.utc))
                created += due
            ahead = created / rate - (time.perf_counter() - started)
            if ahead > 0:
                try:
                    await asyncio.wait_for(stop.wait(), ahead)
                except asyncio.TimeoutError:
                    pass
    return created


async def measure(url: str, tenant_id: UUID, agent_id: UUID, args: argparse.Namespace) -> dict:
    settings = SchedulerSettings(retention_days=30, retention_batch_size=args.batch_size,
                                 retention_budget_seconds=args.budget)
    pool = await open_pool(url, application_name=APPLICATION, max_size=2)
    with psycopg.connect(url) as conn:  # the backlog's events retention must delete one by one
        in_default = conn.execute("SELECT count(*) FROM run_events_default").fetchone()[0]
    stop = asyncio.Event()
    cpu_before = machine_cpu()
    creator = asyncio.create_task(create_at_rate(url, tenant_id, agent_id, args.rate, stop))
    await asyncio.sleep(1.0)  # the creation stream is running before retention starts
    created_before = await count_recent(url)
    ticks, deleted = [], 0
    backends_before = await backends_cpu(url)
    started = time.perf_counter()
    while deleted < args.backlog:
        tick_started = time.perf_counter()
        got = await trim_retention(pool, settings, now=None)
        ticks.append({"deleted": got, "s": round(time.perf_counter() - tick_started, 2)})
        deleted += got
        if got == 0:
            break
    elapsed = time.perf_counter() - started
    backend_cpu_s = cpu_used(backends_before, await backends_cpu(url))
    created_during = await count_recent(url) - created_before
    stop.set()
    created_total = await creator
    cpu_after = machine_cpu()
    await pool.close()
    with psycopg.connect(url) as conn:
        left_old = conn.execute("SELECT count(*) FROM executions WHERE finished_at < now() - "
                                "interval '30 days'").fetchone()[0]
        recent = conn.execute("SELECT count(*) FROM executions").fetchone()[0]
        events = conn.execute("SELECT count(*) FROM run_events r WHERE EXISTS"
                              " (SELECT 1 FROM executions e WHERE e.id = r.execution_id)"
                              ).fetchone()[0]
        orphans = conn.execute("SELECT count(*) FROM run_events").fetchone()[0] - events
        claims = conn.execute("SELECT count(*) FROM execution_claims").fetchone()[0]
    # Everything past the horizon went; every run created meanwhile, its claim and its journal
    # are still there. The deleted runs' events in a partition of their own wait for its DROP;
    # those in the default partition retention deleted.
    orphans_expected = len(EVENTS) * args.backlog - in_default
    ok = (left_old == 0 and deleted == args.backlog and recent == created_total
          and events == len(EVENTS) * created_total and claims == created_total
          and orphans == orphans_expected)
    return {"deleted": deleted, "elapsed_s": elapsed, "ticks": ticks,
            "created_during": created_during, "created_total": created_total,
            "busy_pct": busy_pct(cpu_before, cpu_after), "backend_cpu_s": backend_cpu_s,
            "in_default": in_default, "verified": ok}


async def backends_cpu(url: str) -> dict[int, float | None]:
    """CPU seconds so far of each Postgres backend serving retention's pool, by pid."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                                 " AND datname = current_database()",
                                 (APPLICATION,))
        return {pid: process_cpu_s(pid) for (pid,) in await cur.fetchall()}


def cpu_used(before: dict[int, float | None], after: dict[int, float | None]) -> float | None:
    """CPU seconds retention's backends spent between two readings (a backend opened between
    them counts from zero); None when the server's processes cannot be read (a remote server).
    Unlike wall time, this hardly moves with what else the machine is doing."""
    if not after or any(v is None for v in after.values()):
        return None
    return sum(cpu - (before.get(pid) or 0.0) for pid, cpu in after.items())


async def count_recent(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM executions WHERE finished_at > now() - "
                                 "interval '1 day'")
        return (await cur.fetchone())[0]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE,
                        help="finished runs created per second while retention runs")
    parser.add_argument("--backlog", type=int, default=600_000,
                        help="runs past the horizon for retention to delete")
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="TICKWORK_RETENTION_BATCH_SIZE for the ticks")
    parser.add_argument("--journal", choices=("month", "default", "upgraded"), default="month",
                        help="a database older than a month (its month partition made ahead), "
                             "younger (as its partition upkeep leaves it), or upgraded from "
                             "before 0055 (the backlog in the default partition, adopted first)")
    parser.add_argument("--budget", type=float,
                        default=SchedulerSettings.model_fields["retention_budget_seconds"].default,
                        help="TICKWORK_RETENTION_BUDGET_SECONDS for the ticks")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    with scratch_database("tickwork_bench_retention") as url:
        describe_server(url, ("shared_buffers", "synchronous_commit"))
        tenant_id, agent_id = setup(url, args.journal)
        seeded_s = asyncio.run(seed_backlog(url, tenant_id, agent_id, args.backlog))
        say(f"backlog: {args.backlog} finished runs past the horizon (execution, claim, "
            f"{len(EVENTS)} events each) in {seeded_s:.1f} s")
        adoption = asyncio.run(adopt_default(url)) if args.journal == "upgraded" else None
        if adoption:
            say(f"adoption of the default partition ({len(EVENTS) * args.backlog} events): "
                f"adopted {adoption['adopted']} in {len(adoption['upkeeps_s'])} upkeeps "
                f"({adoption['upkeeps_s']} s); slowest of {adoption['appends_during']} journal "
                f"appends meanwhile {adoption['append_max_ms']} ms (before: "
                f"{adoption['append_max_ms_before']} ms)")
        result = asyncio.run(measure(url, tenant_id, agent_id, args))
    deleted_per_s = result["deleted"] / result["elapsed_s"]
    created_per_s = result["created_during"] / result["elapsed_s"]
    # deleted_per_s is how fast a tick drains a backlog. A tick comes once a minute and deletes
    # for at most its budget (and no later than 45 s into the tick), so what retention can
    # delete per second over the long run is that rate times that share of the minute; the
    # ratio is taken on this sustained figure, against the rate asked for or the rate reached
    # if the creator ran ahead (never flattered by a creator the machine slowed down).
    share_of_minute = min(args.budget, RETENTION_ENDS_BY_SECONDS) / TICK_INTERVAL_S
    sustained_per_s = deleted_per_s * share_of_minute
    create_per_s = max(created_per_s, args.rate)
    ratio = sustained_per_s / create_per_s
    drain_ratio = deleted_per_s / create_per_s
    cpu_s = result["backend_cpu_s"]
    cpu_ms_per_1000 = round(1e6 * cpu_s / result["deleted"], 1) if cpu_s and result["deleted"] else None
    # The ratio retention's backend would reach with one core to itself (and commits that cost
    # no CPU): its CPU per run, not the machine's load, sets it. A ceiling, not a measurement.
    one_core_ratio = (round(1e6 / cpu_ms_per_1000 * share_of_minute / create_per_s, 2)
                      if cpu_ms_per_1000 else None)
    for tick in result["ticks"]:
        say(f"tick: deleted {tick['deleted']} in {tick['s']} s")
    say(f"retention deleted {result['deleted']} runs in {result['elapsed_s']:.1f} s "
        f"({deleted_per_s:.0f}/s, batch {args.batch_size}, budget {args.budget} s) while "
        f"{result['created_during']} runs were created ({created_per_s:.0f}/s, asked "
        f"{args.rate:.0f}/s); {result['in_default']} of the backlog's events were in the default "
        f"partition; machine {result['busy_pct']} % busy; retention's backend used "
        f"{cpu_ms_per_1000} ms CPU per 1,000 runs")
    say(f"sustained: {sustained_per_s:.0f} runs/s deleted (one tick a minute, {args.budget} s"
        f" budget); ratio_delete_vs_create {ratio:.1f} (goal >= 10; {drain_ratio:.1f} while a"
        f" tick drains); verified: {result['verified']}")
    load = [round(v, 2) for v in os.getloadavg()]
    print(json.dumps({
        "deleted_per_s": round(deleted_per_s, 1), "created_per_s": round(created_per_s, 1),
        "create_rate_asked": args.rate,
        "sustained_deleted_per_s": round(sustained_per_s, 1),
        "ratio_delete_vs_create": round(ratio, 2), "drain_ratio": round(drain_ratio, 2),
        "backlog": args.backlog, "journal": args.journal, "batch_size": args.batch_size, "budget_s": args.budget,
        "events_in_default": result["in_default"], "adoption": adoption,
        "ticks": len(result["ticks"]), "elapsed_s": round(result["elapsed_s"], 2),
        "pg_cpu_ms_per_1000_runs": cpu_ms_per_1000, "one_core_ratio": one_core_ratio,
        "machine_busy_pct": result["busy_pct"], "load_average": load,
        "verified": result["verified"]}), flush=True)
    if not result["verified"]:
        raise SystemExit("verification failed: retention deleted the wrong runs or left some")


if __name__ == "__main__":
    main()
