"""Benchmark of agent runs through the full path, next to a bare SKIP LOCKED floor and pgqueuer.

Run from the repo root:  .venv/bin/python bench/runs.py  [--runs N] [--concurrency C]
                         [--pickup-runs N] [--profile-runs N] [--pgqueuer-venv DIR] [--no-pgqueuer]

The database is TICKWORK_DATABASE_URL when set (a scratch database ``tickwork_bench_runs`` is
created on that server and dropped at the end), else an embedded Postgres in a fresh /tmp folder.
One tenant and one agent with no tools; every run has the input ``{"script": [{"text": "ok"}]}``
(one scripted model turn), so each journals run_start, step_start, content_delta, run_complete.

- floor:      a table shaped like a queue (id, status, created_at) with N rows, emptied by C
              asyncio connections, each looping ``SELECT id … FOR UPDATE SKIP LOCKED LIMIT B`` +
              ``UPDATE … SET status = 'done'``, one transaction per batch (B = C, and B = 1).
- throughput: N runs queued through the real enqueue path (``scheduler.runs.start_agent_run``,
              i.e. the ``insert_agent_run`` query, one statement per run, from a few
              connections), then ONE ``tickwork worker --concurrency C`` process is started.
              runs/s = N / (first run_start ts .. last run_complete ts), read from the journal,
              so process start-up is not counted. The worker's CPU and its Postgres backends'
              CPU are read from /proc when the server is on this machine.
- pickup:     with that worker idle and running, runs are enqueued one at a time ~20 ms apart;
              pickup = run_start.ts - execution.created_at. created_at is now() of the insert
              transaction, i.e. its start, so the figure over-states pickup by the insert's own
              duration (reported as insert_ms); the lower bound measured from the moment the
              client saw the commit acknowledged is reported next to it.
- pgqueuer:   pgqueuer 1.6.0 installed in a separate venv in a temp folder (or --pgqueuer-venv),
              its schema installed with its CLI (``pgq install``) into the same scratch database,
              N no-op jobs enqueued in batches, one QueueManager process (asyncpg, dequeue batch
              size C) drains them; jobs/s = N / (first 'picked' .. last 'successful' in its log).
              Its default puts no bound on the jobs in flight (it dequeues the next batch while
              the last runs); a second drain holds at most C in flight, as --concurrency C
              holds runs (batch C/2: pgqueuer wants the bound at least twice the batch):
              ``ratio_vs_pgqueuer_bounded``, like for like.
- profile:    (``--profile-runs``, default 1,000) an in-process Worker wired by the same
              ``build_worker`` the CLI uses, with psycopg's cursor execute and transaction
              enter/exit wrapped: statements and round trips per run by query name, and the
              time per run in each step at concurrency 1.

Readable lines go to stdout as it runs; the very last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import UUID

import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict

import statements  # bench/statements.py
from scratch import (WorkerProcess, busy_pct, describe_server,  # bench/scratch.py
                     machine_cpu, process_cpu_s, say, scratch_database)
from tickwork.scheduler.runs import request_hash, start_agent_run
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.db import connect
from tickwork.sql.ids import new_id
from tickwork.sql.migrate import migrate
from tickwork.sql.notify import Notifier
from tickwork.worker.tools.publish import publish_catalog

SCRATCH_DB = "tickwork_bench_runs"
RUN_INPUT = {"script": [{"text": "ok"}]}
TIMEOUT_MINUTES = 5
ENQUEUE_CONNECTIONS = 8
PGQUEUER = "pgqueuer==1.6.0"
PGQUEUER_DRIVER_PACKAGE = "asyncpg"
STALL_SECONDS = 60.0  # no progress for this long: the bench gives up instead of hanging
# Left out of the statement figures: the bench's own progress polls, pgqueuer's enqueue.
OWN_POLLING = ("count(*) FILTER (WHERE status IN",)
PGQUEUER_ENQUEUE = "INSERT INTO pgqueuer AS job"


def as_url(conninfo: str) -> str:
    """A postgresql:// URL for clients that take nothing else (asyncpg, pgqueuer's CLI)."""
    parts = conninfo_to_dict(conninfo)
    user = quote(str(parts.get("user", "postgres")), safe="")
    password = parts.get("password")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else f"{user}@"
    host = str(parts.get("host", "127.0.0.1"))
    port = parts.get("port", 5432)
    if host.startswith("/"):  # a socket directory
        return f"postgresql://{auth}/{parts['dbname']}?host={quote(host, safe='')}&port={port}"
    return f"postgresql://{auth}{host}:{port}/{parts['dbname']}"


def checkpoint(url: str) -> None:
    """Start each measured phase with no checkpoint pending from the previous one."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            pass  # not a superuser on a shared server: measurements are just a little noisier


def setup(url: str) -> tuple[UUID, UUID]:
    """Migrate, publish the tool catalog, and add one tenant and one agent with no tools."""
    migrate(url)
    tools = publish_catalog(url)
    tenant_id, agent_id = new_id(), new_id()
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'bench')", (tenant_id,))
        conn.execute("INSERT INTO agents (id, tenant_id, name, instructions) "
                     "VALUES (%s, %s, 'bench-agent', 'Answer briefly.')", (agent_id, tenant_id))
    say(f"migrated; {tools} tools published; one tenant, one agent with no tools")
    return tenant_id, agent_id


# --- CPU accounting (only when the server runs on this machine) --------------------------------

def backends_cpu_s(url: str, application_prefix: str) -> float | None:
    """CPU seconds the Postgres backends of one application have used since they started."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name LIKE %s", (application_prefix + "%",)).fetchall()]
    values = [process_cpu_s(pid) for pid in pids]
    if not values or any(v is None for v in values):
        return None  # a remote server, or no permission to read its processes
    return sum(values)


# --- the floor --------------------------------------------------------------------------------

FLOOR_TABLE = """CREATE TABLE bench_floor_queue (
                     id         bigint PRIMARY KEY,
                     status     text NOT NULL DEFAULT 'queued',
                     created_at timestamptz NOT NULL DEFAULT now());
                 CREATE INDEX bench_floor_queue_ready_idx ON bench_floor_queue (id)
                     WHERE status = 'queued'"""
FLOOR_CLAIM = """SELECT id FROM bench_floor_queue WHERE status = 'queued'
                  ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""
FLOOR_DONE = "UPDATE bench_floor_queue SET status = 'done' WHERE id = ANY(%(ids)s)"


def load_floor(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_floor_queue")
        conn.execute(FLOOR_TABLE)
        conn.execute("INSERT INTO bench_floor_queue (id) SELECT generate_series(1, %s)", (rows,))
        conn.execute("VACUUM ANALYZE bench_floor_queue")


async def _floor_worker(url: str, batch: int) -> int:
    done = 0
    conn = await connect(url, application_name="tickwork-bench-floor")
    try:
        while True:
            async with conn.transaction():
                cursor = await conn.execute(FLOOR_CLAIM, {"limit": batch})
                ids = [row["id"] for row in await cursor.fetchall()]
                if ids:
                    await conn.execute(FLOOR_DONE, {"ids": ids})
            done += len(ids)
            if not ids:
                return done
    finally:
        await conn.close()


def measure_floor(url: str, rows: int, concurrency: int, batch: int) -> float:
    """Rows/s with ``concurrency`` connections claiming ``batch`` rows per transaction."""
    load_floor(url, rows)
    checkpoint(url)

    async def run() -> int:
        return sum(await asyncio.gather(*(_floor_worker(url, batch) for _ in range(concurrency))))

    started = time.perf_counter()
    handled = asyncio.run(run())
    elapsed = time.perf_counter() - started
    with psycopg.connect(url) as conn:
        left = conn.execute("SELECT count(*) FROM bench_floor_queue WHERE status <> 'done'"
                            ).fetchone()[0]
    if handled != rows or left:
        raise SystemExit(f"floor is wrong: handled {handled} of {rows}, {left} left")
    rate = rows / elapsed
    say(f"floor   batch {batch:>3}: {rows:,} rows by {concurrency} connections in {elapsed:.2f} s"
        f" = {rate:,.0f} rows/s")
    return rate


# --- enqueueing through the real path ---------------------------------------------------------

async def enqueue_runs(url: str, tenant_id: UUID, agent_id: UUID, count: int,
                       connections: int = ENQUEUE_CONNECTIONS) -> float:
    """Queue ``count`` runs with start_agent_run (one insert_agent_run statement each),
    from a few connections side by side; return the wall seconds."""
    principal = Principal(tenant_id=tenant_id, is_admin=False)
    body_hash = request_hash(f"agents/{agent_id}/runs", {"input": RUN_INPUT})
    shares = [count // connections + (1 if i < count % connections else 0)
              for i in range(connections)]

    async def one_connection(share: int) -> None:
        conn = await connect(url, application_name="tickwork-bench-enqueue")
        notifier = Notifier(conn)  # as the API wakes workers: after each commit
        try:
            for _ in range(share):
                await start_agent_run(conn, principal, agent_id, run_input=RUN_INPUT,
                                      timeout_minutes=TIMEOUT_MINUTES, idempotency_key=None,
                                      body_hash=body_hash, notifier=notifier)
        finally:
            await notifier.drain()
            await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection(share) for share in shares if share))
    return time.perf_counter() - started


# --- the worker process ------------------------------------------------------------------------

FINISHED = ("completed", "failed", "cancelled")
PROGRESS = """SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')),
                     count(*) FROM executions"""


def wait_until_finished(url: str, total: int, worker: WorkerProcess, *,
                        on_first_progress=None) -> None:
    """Poll a count every 0.2 s until every execution has finished; give up on a stall."""
    last_done, last_change = -1, time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            done, _ = conn.execute(PROGRESS).fetchone()
            now = time.monotonic()
            if done != last_done:
                if last_done <= 0 < done and on_first_progress is not None:
                    on_first_progress(done)
                last_done, last_change = done, now
            if done >= total:
                return
            worker.check_alive()
            if now - last_change > STALL_SECONDS:
                raise SystemExit(f"no run finished for {STALL_SECONDS:.0f} s ({done:,} of "
                                 f"{total:,} done); worker log:\n"
                                 + worker.log_path.read_text()[-3000:])
            time.sleep(0.2)


REQUIRED_EVENTS = ("run_start", "step_start", "content_delta", "run_complete")


def verify_runs(url: str, executions: int) -> dict[str, int]:
    """Fail loudly unless every run completed as done with (at least) its four events, each
    exactly once; other event types (a gate decision, say) are counted, not refused."""
    with psycopg.connect(url) as conn:
        outcomes = dict(conn.execute(
            "SELECT status || '/' || coalesce(outcome, '-'), count(*) FROM executions GROUP BY 1"
        ).fetchall())
        events = dict(conn.execute("SELECT type, count(*) FROM run_events GROUP BY type"
                                   ).fetchall())
        leftovers = conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0]
    wrong = {t: events.get(t, 0) for t in REQUIRED_EVENTS if events.get(t, 0) != executions}
    if outcomes != {"completed/done": executions} or wrong or leftovers:
        raise SystemExit(f"runs are wrong: executions {outcomes}, events {events}, "
                         f"{leftovers} queue tasks left (wanted {executions} completed/done, "
                         f"each with one of {', '.join(REQUIRED_EVENTS)})")
    return events


def measure_throughput(url: str, tenant_id: UUID, agent_id: UUID, args: argparse.Namespace,
                       log_path: Path, *, pg_statements: bool
                       ) -> tuple[dict[str, Any], WorkerProcess]:
    """Queue N runs, start one worker process, time first run_start .. last run_complete.
    The worker is left running for the pickup phase. ``pg_statements``: the server's
    pg_stat_statements is readable, so Postgres's work per run is read too."""
    enqueue_s = asyncio.run(enqueue_runs(url, tenant_id, agent_id, args.runs))
    say(f"enqueued {args.runs:,} runs with start_agent_run from {ENQUEUE_CONNECTIONS} "
        f"connections in {enqueue_s:.1f} s = {args.runs / enqueue_s:,.0f} runs/s")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE executions, queue_tasks")
    checkpoint(url)
    if pg_statements:
        statements.reset(url)

    samples: dict[str, Any] = {}
    worker = WorkerProcess(url, args.concurrency, log_path)
    spy = None

    def first_progress(done: int) -> None:
        nonlocal spy
        samples["cpu_start"] = process_cpu_s(worker.pid)
        samples["done_start"] = done
        samples["machine_start"] = machine_cpu()
        if args.py_spy:
            spy = start_py_spy(worker.pid, args.py_spy)

    wait_until_finished(url, args.runs, worker, on_first_progress=first_progress)
    wall = time.perf_counter() - worker.started
    cpu_end, machine_end = process_cpu_s(worker.pid), machine_cpu()
    if spy is not None:
        stop_py_spy(spy, args.py_spy)
    pg_cpu = backends_cpu_s(url, "tickwork-worker")
    pg_work = (statements.per_unit(statements.read(url, leave_out=OWN_POLLING), args.runs,
                                   "tickwork", "run") if pg_statements else {})

    verify_runs(url, args.runs)
    with psycopg.connect(url) as conn:
        first, last, events = conn.execute(
            "SELECT min(ts) FILTER (WHERE type = 'run_start'), "
            "       max(ts) FILTER (WHERE type = 'run_complete'), count(*) FROM run_events"
        ).fetchone()
        latency = [row[0] for row in conn.execute(
            "SELECT extract(epoch FROM r.ts - e.created_at) * 1000 FROM executions e "
            "JOIN run_events r ON r.execution_id = e.id AND r.type = 'run_start'").fetchall()]
    span = (last - first).total_seconds()
    figures: dict[str, Any] = {
        "runs_per_s": round(args.runs / span, 1),
        "events_per_s": round(events / span, 1),
        "span_s": round(span, 3),
        "wall_with_startup_s": round(wall, 2),
        "enqueue_runs_per_s": round(args.runs / enqueue_s, 1),
        "events": events,
        "events_per_run": round(events / args.runs, 2),
        **{f"pg_{key}_per_run": value for key, value in pg_work.items()},
    }
    say(f"tickwork: {args.runs:,} runs ({events:,} journal events) by one worker process "
        f"(--concurrency {args.concurrency}) in {span:.2f} s (first run_start .. last "
        f"run_complete) = {figures['runs_per_s']:,.0f} runs/s, {figures['events_per_s']:,.0f} "
        f"events/s; {wall:.1f} s wall with process start-up")
    say(f"  queue wait of these runs (run_start - created_at, all queued up front): p50 "
        f"{statistics.median(latency) / 1000:.1f} s")
    if samples.get("cpu_start") is not None and cpu_end is not None:
        runs_measured = args.runs - samples["done_start"]
        figures["worker_cpu_ms_per_run"] = round(
            1000 * (cpu_end - samples["cpu_start"]) / max(runs_measured, 1), 3)
        figures["machine_busy_pct"] = busy_pct(samples["machine_start"], machine_end)
        line = (f"  worker process CPU {figures['worker_cpu_ms_per_run']:.3f} ms/run "
                f"({100 * (cpu_end - samples['cpu_start']) / span:.0f}% of one core)")
        if pg_cpu is not None:
            figures["pg_backend_cpu_ms_per_run"] = round(1000 * pg_cpu / args.runs, 3)
            line += (f"; its Postgres backends {figures['pg_backend_cpu_ms_per_run']:.3f} ms/run"
                     f" ({100 * pg_cpu / span:.0f}% of one core)")
        line += f"; machine {figures['machine_busy_pct']}% busy of {os.cpu_count()} CPUs"
        say(line)
    return figures, worker


def start_py_spy(pid: int, out: str) -> subprocess.Popen:
    """Sample the worker while it drains the queue (--py-spy): py-spy's collapsed stacks
    (one line per stack with its sample count), non-blocking so the worker is not paused."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([binary, "record", "--pid", str(pid), "--rate", "250",
                             "--nonblocking", "--format", "raw", "--output", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_py_spy(spy: subprocess.Popen, out: str) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
    try:
        _, err = spy.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        err = "py-spy did not stop"
    if spy.returncode not in (0, -signal.SIGINT) or not Path(out).exists():
        say(f"py-spy: no profile ({(err or '').strip()[-300:]})")
        return
    say(f"py-spy: the worker's stacks while it drained the queue are in {out}; top frames:")
    for line in top_frames(Path(out).read_text()):
        say(f"    {line}")


def top_frames(collapsed: str, count: int = 15) -> list[str]:
    """The functions that held the most samples themselves (the stack's last frame), as % of
    all; the event loop's wait (select) is one of them. Inclusive shares are in the file."""
    total, leaves = 0, collections.Counter()
    for line in collapsed.splitlines():
        stack, _, samples = line.rpartition(" ")
        if not samples.isdigit():
            continue
        total += int(samples)
        leaves[stack.rsplit(";", 1)[-1]] += int(samples)
    return [f"{100 * n / max(total, 1):5.1f}%  {frame}" for frame, n in
            leaves.most_common(count)]


# --- pickup latency ----------------------------------------------------------------------------

def percentile(values: list[float], p: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def measure_pickup(url: str, tenant_id: UUID, agent_id: UUID, worker: WorkerProcess,
                   args: argparse.Namespace, already: int) -> dict[str, Any]:
    """Enqueue runs one at a time, spaced apart, while the worker idles; pickup is
    run_start.ts - created_at (and, as a lower bound, run_start.ts - commit acknowledged)."""
    principal = Principal(tenant_id=tenant_id, is_admin=False)
    body_hash = request_hash(f"agents/{agent_id}/runs", {"input": RUN_INPUT})
    acked: dict[UUID, tuple[float, float]] = {}

    async def enqueue_spaced() -> None:
        conn = await connect(url, application_name="tickwork-bench-pickup")
        notifier = Notifier(conn)
        try:
            for _ in range(args.pickup_runs):
                before = time.time()
                run = await start_agent_run(conn, principal, agent_id, run_input=RUN_INPUT,
                                            timeout_minutes=TIMEOUT_MINUTES,
                                            idempotency_key=None, body_hash=body_hash,
                                            notifier=notifier)
                acked[UUID(str(run["id"]))] = (before, time.time())
                await asyncio.sleep(args.pickup_gap_ms / 1000)
        finally:
            await notifier.drain()
            await conn.close()

    asyncio.run(enqueue_spaced())
    wait_until_finished(url, already + args.pickup_runs, worker)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT e.id, extract(epoch FROM e.created_at), extract(epoch FROM s.ts), "
            "       extract(epoch FROM c.ts) "
            "  FROM executions e "
            "  JOIN run_events s ON s.execution_id = e.id AND s.type = 'run_start' "
            "  JOIN run_events c ON c.execution_id = e.id AND c.type = 'run_complete' "
            " WHERE e.id = ANY(%s)", (list(acked),)).fetchall()
    if len(rows) != args.pickup_runs:
        raise SystemExit(f"pickup: {len(rows)} of {args.pickup_runs} runs have both events")
    pickup = sorted(1000 * (float(start) - float(created)) for _, created, start, _ in rows)
    from_ack = sorted(1000 * (float(start) - acked[eid][1]) for eid, _, start, _ in rows)
    end_to_end = sorted(1000 * (float(done) - float(created)) for _, created, _, done in rows)
    insert_ms = sorted(1000 * (after - before) for before, after in acked.values())
    figures = {
        "pickup_p50_ms": round(percentile(pickup, 50), 2),
        "pickup_p95_ms": round(percentile(pickup, 95), 2),
        "pickup_p99_ms": round(percentile(pickup, 99), 2),
        "pickup_from_commit_ack_p50_ms": round(percentile(from_ack, 50), 2),
        "run_latency_p50_ms": round(percentile(end_to_end, 50), 2),
        "insert_ms_p50": round(percentile(insert_ms, 50), 2),
    }
    say(f"pickup ({args.pickup_runs} runs enqueued one at a time, {args.pickup_gap_ms} ms apart, "
        f"worker idle): run_start - created_at p50 {figures['pickup_p50_ms']} ms, p95 "
        f"{figures['pickup_p95_ms']} ms, p99 {figures['pickup_p99_ms']} ms")
    say(f"  created_at is the insert transaction's start: the client's whole insert took p50 "
        f"{figures['insert_ms_p50']} ms; measured from the client seeing the commit "
        f"acknowledged (a lower bound) pickup p50 is {figures['pickup_from_commit_ack_p50_ms']} "
        f"ms; created -> run_complete p50 {figures['run_latency_p50_ms']} ms")
    return figures


# --- pgqueuer ----------------------------------------------------------------------------------

PGQUEUER_DRIVER = textwrap.dedent('''
    """Enqueue N no-op jobs, drain them with one QueueManager, print one JSON line."""
    import asyncio, json, os, sys, time
    from datetime import timedelta

    import asyncpg
    import pgqueuer
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode


    async def main(cfg):
        dsn, jobs, batch = cfg["dsn"], cfg["jobs"], cfg["batch_size"]
        conn = await asyncpg.connect(dsn)
        await conn.execute("TRUNCATE pgqueuer_log")  # this drain's log only
        queries = Queries(AsyncpgDriver(conn))
        started = time.perf_counter()
        for offset in range(0, jobs, 1000):
            k = min(1000, jobs - offset)
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        enqueue_s = time.perf_counter() - started
        await conn.close()
        await asyncio.to_thread(cfg_checkpoint, dsn)

        qm_conn = await asyncpg.connect(dsn)
        qm = QueueManager(Queries(AsyncpgDriver(qm_conn)))

        @qm.entrypoint("noop")
        async def noop(job):
            return None

        backend = qm_conn.get_server_pid()
        started, cpu, backend_cpu = time.perf_counter(), time.process_time(), proc_cpu(backend)
        await qm.run(mode=QueueExecutionMode.drain, batch_size=batch,
                     dequeue_timeout=timedelta(seconds=1),
                     max_concurrent_tasks=cfg["max_concurrent_tasks"])
        wall_s = time.perf_counter() - started
        cpu_s, backend_end = time.process_time() - cpu, proc_cpu(backend)
        backend_cpu_s = (None if backend_cpu is None or backend_end is None
                         else backend_end - backend_cpu)
        await qm_conn.close()

        conn = await asyncpg.connect(dsn)
        row = await conn.fetchrow("""
            SELECT (SELECT min(created) FROM pgqueuer_log WHERE status = 'picked') AS first_pick,
                   (SELECT max(created) FROM pgqueuer_log WHERE status = 'successful') AS last_done,
                   (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful') AS done,
                   (SELECT count(*) FROM pgqueuer) AS left_in_queue""")
        await conn.close()
        print(json.dumps({"jobs": jobs, "done": row["done"], "left_in_queue": row["left_in_queue"],
                          "span_s": (row["last_done"] - row["first_pick"]).total_seconds(),
                          "wall_s": wall_s, "enqueue_s": enqueue_s, "process_cpu_s": cpu_s,
                          "backend_cpu_s": backend_cpu_s,
                          "version": pgqueuer.__version__}), flush=True)


    def proc_cpu(pid):
        """CPU seconds of a process on this machine (its backend), None when unreadable: as
        bench/scratch.py's process_cpu_s, which pgqueuer's venv (no tickwork) cannot import."""
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


    def cfg_checkpoint(dsn):
        async def run():
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute("CHECKPOINT")
            except asyncpg.PostgresError:
                pass
            finally:
                await conn.close()
        asyncio.run(run())


    asyncio.run(main(json.loads(sys.argv[1])))
''')


def pgqueuer_venv(args: argparse.Namespace, scratch: Path) -> Path:
    """A venv with pgqueuer 1.6.0 and asyncpg: --pgqueuer-venv when given (created there if it
    does not hold pgqueuer yet), else a new one in the temp folder."""
    venv = Path(args.pgqueuer_venv) if args.pgqueuer_venv else scratch / "pgqueuer-venv"
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run(
            [str(python), "-c", "import pgqueuer, asyncpg, sys; "
             "sys.exit(pgqueuer.__version__ != '1.6.0')"], capture_output=True).returncode == 0:
        return venv
    started = time.perf_counter()
    base = getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    PGQUEUER, PGQUEUER_DRIVER_PACKAGE], check=True, capture_output=True, text=True)
    say(f"pgqueuer: installed {PGQUEUER} + {PGQUEUER_DRIVER_PACKAGE} into {venv} in "
        f"{time.perf_counter() - started:.0f} s")
    return venv


def measure_pgqueuer(url: str, args: argparse.Namespace, scratch: Path, *, batch: int,
                     max_in_flight: int | None, pg_statements: bool
                     ) -> tuple[float | None, str | None, dict[str, Any]]:
    """(jobs/s, reason it is missing, details) of one QueueManager draining ``args.runs`` no-op
    jobs, ``batch`` per dequeue, at most ``max_in_flight`` picked at once (None: no bound, its
    default). Never guesses: any failure gives None."""
    try:
        venv = pgqueuer_venv(args, scratch)
        dsn = as_url(url)
        with psycopg.connect(url) as conn:  # installed by an earlier drain of this run?
            present = conn.execute("SELECT to_regclass('pgqueuer') IS NOT NULL").fetchone()[0]
        if not present:
            installed = subprocess.run([str(venv / "bin" / "pgq"), "--pg-dsn", dsn, "install"],
                                       capture_output=True, text=True, timeout=300)
            if installed.returncode != 0:
                return None, f"pgq install failed: {installed.stderr.strip()[-800:]}", {}
        if pg_statements and max_in_flight is None:
            statements.reset(url)
        driver = scratch / "pgqueuer_driver.py"
        driver.write_text(PGQUEUER_DRIVER)
        config = json.dumps({"dsn": dsn, "jobs": args.runs, "batch_size": batch,
                             "max_concurrent_tasks": max_in_flight})
        ran = subprocess.run([str(venv / "bin" / "python"), str(driver), config],
                             capture_output=True, text=True, timeout=1800)
        if ran.returncode != 0:
            return None, f"the pgqueuer driver failed: {ran.stderr.strip()[-800:]}", {}
        result = json.loads(ran.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        detail = getattr(exc, "stderr", None) or ""
        return None, f"{type(exc).__name__}: {exc} {str(detail)[-800:]}".strip(), {}
    if result["done"] != args.runs or result["left_in_queue"]:
        return None, f"pgqueuer did not finish every job: {result}", result
    rate = args.runs / result["span_s"]
    bound = f"at most {max_in_flight} in flight" if max_in_flight else "no bound in flight"
    say(f"pgqueuer {result['version']}: {args.runs:,} no-op jobs by one QueueManager process "
        f"(asyncpg, dequeue batch {batch}, {bound}) in {result['span_s']:.2f} s (first picked "
        f".. last successful in its log) = {rate:,.0f} jobs/s; {result['wall_s']:.2f} s wall; "
        f"enqueued in {result['enqueue_s']:.2f} s")
    if pg_statements and max_in_flight is None:
        # Its enqueue is left out, as the runs' is (they are queued before the timing starts).
        work = statements.per_unit(statements.read(url, leave_out=(PGQUEUER_ENQUEUE,)),
                                   args.runs, "pgqueuer", "job")
        result.update({f"pg_{key}_per_job": value for key, value in work.items()})
    result["process_cpu_ms_per_job"] = round(1000 * result["process_cpu_s"] / args.runs, 3)
    if result.get("backend_cpu_s") is not None:
        result["backend_cpu_ms_per_job"] = round(1000 * result["backend_cpu_s"] / args.runs, 3)
        say(f"  its process CPU {result['process_cpu_ms_per_job']:.3f} ms/job, its Postgres "
            f"backend {result['backend_cpu_ms_per_job']:.3f} ms/job (over its whole drain)")
    return rate, None, result


def cpu_ceilings(figures: dict[str, Any], pgq: dict[str, Any],
                 pgq_rate: float | None) -> dict[str, Any]:
    """What this machine's cores could give each side at the CPU each spent per unit: the
    worker and its backends per run against pgqueuer's process and its backend per job (both
    from /proc, so only for a server on this host). Says whether the ratio goal is out of reach
    at this CPU per run even with every core busy, whatever the waiting between them."""
    worker = figures.get("worker_cpu_ms_per_run")
    backends = figures.get("pg_backend_cpu_ms_per_run")
    process, backend = pgq.get("process_cpu_ms_per_job"), pgq.get("backend_cpu_ms_per_job")
    if None in (worker, backends, process, backend) or not pgq_rate:
        return {}
    cores = os.cpu_count() or 1
    per_run, per_job = worker + backends, process + backend
    ceilings = {
        "cpu_ms_per_run": round(per_run, 3),
        "pgqueuer_cpu_ms_per_job": round(per_job, 3),
        "cpu_ceiling_runs_per_s": round(cores * 1000 / per_run),
        "pgqueuer_cpu_ceiling_jobs_per_s": round(cores * 1000 / per_job),
        "ratio_of_cpu_ceilings": round(per_job / per_run, 3),
        # The most a run may cost (worker + backends) for 1.2x pgqueuer's measured rate with
        # every core busy on tickwork alone.
        "goal_cpu_ms_per_run_on_every_core": round(cores * 1000 / (1.2 * pgq_rate), 3),
    }
    say(f"CPU per run (worker + its backends) {per_run:.3f} ms against pgqueuer's {per_job:.3f} "
        f"per job: {cores} cores give at most {ceilings['cpu_ceiling_runs_per_s']:,} runs/s "
        f"against {ceilings['pgqueuer_cpu_ceiling_jobs_per_s']:,} jobs/s "
        f"({ceilings['ratio_of_cpu_ceilings']:.2f}x); 1.2x pgqueuer's {pgq_rate:,.0f} jobs/s "
        f"would need at most {ceilings['goal_cpu_ms_per_run_on_every_core']:.3f} ms per run "
        f"with every core busy")
    return ceilings


# --- where a worker's time goes (--profile-runs) -------------------------------------------------

class StatementCounter:
    """Counts and times every statement and transaction boundary psycopg sends, by query name,
    while installed (a monkeypatch of this process's psycopg; restored by ``remove``)."""

    def __init__(self) -> None:
        self.names = {" ".join(text.split()): name for name, text in QUERIES.items()}
        self.count: collections.Counter[str] = collections.Counter()
        self.seconds: collections.Counter[str] = collections.Counter()
        # (name, sent, answered, this process's CPU at sending, at the answer) of each
        self.spans: list[tuple[str, float, float, float, float]] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def name(self, query: Any) -> str:
        text = " ".join(str(query if isinstance(query, str) else query.as_string(None)).split())
        if text == "":
            return "(pool check: empty query)"
        return self.names.get(text, text[:50])

    def _wrap(self, owner: Any, attr: str, label) -> None:
        original = getattr(owner, attr)
        counter = self

        async def wrapped(self_, *a, **kw):
            started, cpu_started = time.perf_counter(), time.process_time()
            try:
                return await original(self_, *a, **kw)
            finally:
                key, ended = label(a), time.perf_counter()
                counter.count[key] += 1
                counter.seconds[key] += ended - started
                counter.spans.append((key, started, ended, cpu_started, time.process_time()))

        self._saved.append((owner, attr, original))
        setattr(owner, attr, wrapped)

    def install(self) -> None:
        self._wrap(psycopg.AsyncCursor, "execute", lambda a: self.name(a[0]))
        self._wrap(psycopg.AsyncTransaction, "__aenter__", lambda a: "BEGIN")
        self._wrap(psycopg.AsyncTransaction, "__aexit__",
                   lambda a: "ROLLBACK" if a and a[0] is not None else "COMMIT")

    def remove(self) -> None:
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        self._saved.clear()


def in_flight_share(spans: list[tuple], start: float, end: float) -> float:
    """The share of [start, end] during which at least one of these statements was out."""
    busy, reach = 0.0, start
    for _, sent, answered, *_cpu in sorted(spans, key=lambda span: span[1]):
        sent, answered = max(sent, reach), min(answered, end)
        if answered > sent:
            busy += answered - sent
            reach = answered
    return busy / (end - start) if end > start else 0.0


def chain_shares(counter: StatementCounter) -> dict[str, float]:
    """Where the drain's time went, from the first claim to the last journal write: a claim out,
    a journal write out, either, and this process's CPU (the worker's Python) as shares of it.
    With one side busy while the other waits, they add up to about one: a chain, not a pipe."""
    claims = [span for span in counter.spans if span[0] == "claim_queued_executions"]
    writes = [span for span in counter.spans if span[0] == "insert_journal_batch"]
    if not claims or not writes:
        return {}
    start, cpu_start = claims[0][1], claims[0][3]
    _, _, end, _, cpu_end = max(writes, key=lambda span: span[2])
    return {"claim_in_flight_share": round(in_flight_share(claims, start, end), 3),
            "journal_in_flight_share": round(in_flight_share(writes, start, end), 3),
            "claim_or_journal_in_flight_share": round(in_flight_share(claims + writes, start,
                                                                      end), 3),
            "worker_cpu_share": round((cpu_end - cpu_start) / (end - start), 3)}


class StepTimer:
    """Wall time spent in named async functions of the worker modules (monkeypatched)."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._saved: list[tuple[Any, str, Any]] = []

    def wrap(self, module: Any, attr: str, label: str) -> None:
        original = getattr(module, attr, None)
        if original is None:  # the code under test moved on: time what is still there
            say(f"    (no {getattr(module, '__name__', module)}.{attr} to time)")
            return
        timer = self

        async def wrapped(*a, **kw):
            started = time.perf_counter()
            try:
                return await original(*a, **kw)
            finally:
                timer.calls[label] += 1
                timer.seconds[label] += time.perf_counter() - started

        self._saved.append((module, attr, original))
        setattr(module, attr, wrapped)

    def remove(self) -> None:
        for module, attr, original in reversed(self._saved):
            setattr(module, attr, original)
        self._saved.clear()


PROBE = "SELECT count(*) AS n FROM executions WHERE status IN ('completed', 'failed')"


async def _run_in_process_worker(url: str, concurrency: int, total: int) -> float:
    """Run the CLI's own wiring (build_worker) in this process until ``total`` executions are
    finished; return the wall seconds from its start."""
    from tickwork.worker_process import build_worker
    from tickwork.worker.settings import WorkerSettings

    worker = await build_worker(url, WorkerSettings(concurrency=concurrency))
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(worker.run(stop))
    probe = await connect(url, application_name="tickwork-bench-probe")
    try:
        while True:
            cursor = await probe.execute(PROBE)
            if (await cursor.fetchone())["n"] >= total:
                break
            if task.done():
                await task  # raises what stopped it
                raise SystemExit("the in-process worker stopped early")
            await asyncio.sleep(0.2)
        return time.perf_counter() - started
    finally:
        await probe.close()
        stop.set()
        await asyncio.wait_for(task, 60)
        await worker.deps.provider.aclose()
        await worker.deps.pool.close()


def _span_s(url: str, ids_after: int) -> float:
    with psycopg.connect(url) as conn:
        first, last = conn.execute(
            "SELECT min(s.ts), max(c.ts) FROM run_events s JOIN run_events c "
            "ON c.execution_id = s.execution_id AND c.type = 'run_complete' "
            "WHERE s.type = 'run_start' AND s.execution_id IN "
            "(SELECT id FROM executions ORDER BY created_at OFFSET %s)", (ids_after,)).fetchone()
    return (last - first).total_seconds()


def profile_worker(url: str, tenant_id: UUID, agent_id: UUID, args: argparse.Namespace,
                   already: int) -> dict[str, Any]:
    """Statements and round trips per run at --concurrency C, then the time per step of a run
    at concurrency 1 (where each step's wall time is its latency, not queueing)."""
    import tickwork.worker.run_delivery as run_delivery
    import tickwork.worker.runner as runner
    from tickwork.sql.journal import RunJournal

    # The worker logs two JSON lines per run; render them (as the CLI does) into /dev/null.
    from tickwork.logs import configure_logging

    configure_logging()
    devnull = open(os.devnull, "w")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(devnull))
    figures: dict[str, Any] = {}
    try:
        runs = args.profile_runs
        # 1. statements per run at the benchmark's concurrency
        asyncio.run(enqueue_runs(url, tenant_id, agent_id, runs))
        checkpoint(url)
        counter = StatementCounter()
        counter.install()
        try:
            asyncio.run(_run_in_process_worker(url, args.concurrency, already + runs))
        finally:
            counter.remove()
        shares = chain_shares(counter)
        per_run = {name: n / runs for name, n in counter.count.items()
                   if name != "listen_for_tasks" and not name.startswith(PROBE[:30])}
        round_trips = sum(per_run.values())
        say(f"profile: in-process worker (build_worker, --concurrency {args.concurrency}), "
            f"{runs:,} runs: {round_trips:.2f} round trips per run "
            f"({sum(v for k, v in per_run.items() if k not in ('BEGIN', 'COMMIT')):.2f} "
            f"statements + {per_run.get('BEGIN', 0) + per_run.get('COMMIT', 0):.2f} "
            f"BEGIN/COMMIT)")
        for name, n in sorted(per_run.items(), key=lambda item: -item[1]):
            say(f"    {n:6.2f}/run  {name}")
        figures["round_trips_per_run"] = round(round_trips, 2)
        figures["statements_per_run"] = {name: round(n, 3) for name, n in per_run.items()}
        figures["claim_batch_mean"] = round(
            runs / max(counter.count.get("claim_queued_executions", 1), 1), 2)
        say(f"    a claim statement started {figures['claim_batch_mean']:.2f} runs on average")
        if shares:
            figures.update(shares)
            say(f"    of the drain (first claim .. last journal write): a claim out "
                f"{shares['claim_in_flight_share']:.0%}, a journal write out "
                f"{shares['journal_in_flight_share']:.0%}, either "
                f"{shares['claim_or_journal_in_flight_share']:.0%}; the worker's Python on a "
                f"core {shares['worker_cpu_share']:.0%} of it")

        # 2. time per step of one run, at concurrency 1
        serial = max(runs // 4, 50)
        asyncio.run(enqueue_runs(url, tenant_id, agent_id, serial))
        checkpoint(url)
        timer = StepTimer()
        timer.wrap(runner, "claim_queued_runs_once_more",
                   "claim_queued_runs (the one start statement)")
        timer.wrap(runner, "lease_tasks_once_more", "lease_tasks (resumes only)")
        timer.wrap(run_delivery, "run_agent", "run_agent (scripted model turn, buffer events)")
        timer.wrap(RunJournal, "finish", "RunJournal.finish (lock, append, notify, finish)")
        timer.wrap(runner, "run_claimed", "run_claimed (all of one run)")
        cpu_before = time.process_time()
        try:
            wall = asyncio.run(_run_in_process_worker(url, 1, already + runs + serial))
        finally:
            timer.remove()
        cpu = time.process_time() - cpu_before
        span = _span_s(url, already + runs)
        figures["serial_runs_per_s"] = round(serial / span, 1)
        figures["serial_worker_cpu_ms_per_run"] = round(1000 * cpu / serial, 3)
        say(f"profile: concurrency 1, {serial:,} runs: {serial / span:,.0f} runs/s "
            f"({1000 * span / serial:.2f} ms per run, first run_start .. last run_complete); "
            f"this process used {1000 * cpu / serial:.2f} ms CPU per run ({wall:.1f} s wall with "
            "start-up)")
        steps = {}
        for label in timer.calls:
            ms = 1000 * timer.seconds[label] / timer.calls[label]
            steps[label] = round(ms, 3)
            say(f"    {ms:7.3f} ms x {timer.calls[label] / serial:4.2f}/run  {label}")
        figures["serial_step_ms"] = steps
    finally:
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
        devnull.close()
    return figures


# --- main -----------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs (and floor rows and "
                        "pgqueuer jobs)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="the worker's --concurrency; also the floor's connections and its "
                             "batch, and pgqueuer's dequeue batch size")
    parser.add_argument("--pickup-runs", type=int, default=200,
                        help="runs enqueued one at a time for the pickup latency")
    parser.add_argument("--pickup-gap-ms", type=float, default=20.0,
                        help="pause between two of those runs")
    parser.add_argument("--profile-runs", type=int, default=1000,
                        help="runs for the in-process statement and step profile (0: skip it)")
    parser.add_argument("--pgqueuer-venv", default=None,
                        help="reuse (or create) the pgqueuer venv here instead of a temp folder")
    parser.add_argument("--py-spy", default=None, metavar="FILE",
                        help="sample the throughput worker with py-spy (in the venv or on PATH) "
                             "into FILE as collapsed stacks and print the top frames")
    parser.add_argument("--no-pgqueuer", action="store_true",
                        help="skip pgqueuer (its figure is then null)")
    args = parser.parse_args()
    if args.runs < 1 or args.concurrency < 1 or args.pickup_runs < 2 or args.profile_runs < 0:
        parser.error("--runs and --concurrency must be positive, --pickup-runs at least 2")
    return args


def main() -> None:
    args = parse_args()
    # Library logs (migrations, the embedded server) go to stderr: stdout ends with the JSON line.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    scratch = Path(tempfile.mkdtemp(prefix="tickwork-bench-runs-work-"))
    figures: dict[str, Any] = {}
    pgq_rate, pgq_reason, pgq = None, "skipped (--no-pgqueuer)", {}
    bounded_rate = None
    try:
        with scratch_database(SCRATCH_DB) as url:
            describe_server(url, ("shared_buffers", "synchronous_commit", "wal_sync_method",
                                  "max_connections"))
            tenant_id, agent_id = setup(url)
            unreadable = statements.available(url)
            pg_statements = unreadable is None
            if unreadable:
                say(f"no statement figures: pg_stat_statements is not readable here ({unreadable})")

            floor = measure_floor(url, args.runs, args.concurrency, args.concurrency)
            floor_1 = measure_floor(url, args.runs, args.concurrency, 1)

            worker = None
            try:
                throughput, worker = measure_throughput(url, tenant_id, agent_id, args,
                                                        scratch / "worker.log",
                                                        pg_statements=pg_statements)
                figures.update(throughput)
                figures.update(measure_pickup(url, tenant_id, agent_id, worker, args,
                                              already=args.runs))
            finally:
                if worker is not None:
                    worker.stop()

            if not args.no_pgqueuer:
                # As the goal reads: dequeue batch C and pgqueuer's default, no bound on the
                # jobs in flight (it dequeues the next batch while the last runs).
                pgq_rate, pgq_reason, pgq = measure_pgqueuer(url, args, scratch,
                                                             batch=args.concurrency,
                                                             max_in_flight=None,
                                                             pg_statements=pg_statements)
                if pgq_rate is None:
                    say(f"pgqueuer: no figure ({pgq_reason})")
                if args.concurrency >= 2:
                    # Like for like: at most C jobs in flight, as --concurrency C holds runs
                    # (pgqueuer wants the bound at least twice the batch: batch C/2).
                    bounded_rate, bounded_reason, _ = measure_pgqueuer(
                        url, args, scratch, batch=args.concurrency // 2,
                        max_in_flight=args.concurrency, pg_statements=pg_statements)
                    if bounded_rate is None:
                        say(f"pgqueuer bounded: no figure ({bounded_reason})")

            if args.profile_runs:
                figures.update(profile_worker(url, tenant_id, agent_id, args,
                                              already=args.runs + args.pickup_runs))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    ratio = round(figures["runs_per_s"] / pgq_rate, 3) if pgq_rate else None
    bounded_ratio = round(figures["runs_per_s"] / bounded_rate, 3) if bounded_rate else None
    figures["floor_rows_per_s"] = round(floor, 1)
    say(f"tickwork {figures['runs_per_s']:,.0f} runs/s = "
        f"{figures['runs_per_s'] / floor:.2f}x the floor ({floor:,.0f} rows/s at batch "
        f"{args.concurrency}; {floor_1:,.0f} rows/s at batch 1)"
        + (f", {ratio:.2f}x pgqueuer ({pgq_rate:,.0f} jobs/s); goal 1.2x" if ratio else "")
        + f"; pickup p50 {figures['pickup_p50_ms']} ms (goal 3 ms)")
    ceilings = cpu_ceilings(figures, pgq, pgq_rate)
    result = {
        "runs_per_s": figures["runs_per_s"],
        "events_per_s": figures["events_per_s"],
        "floor_rows_per_s": figures["floor_rows_per_s"],
        "floor_rows_per_s_batch1": round(floor_1, 1),
        "pgqueuer_jobs_per_s": round(pgq_rate, 1) if pgq_rate else None,
        "pgqueuer_missing_reason": pgq_reason if pgq_rate is None else None,
        "ratio_vs_pgqueuer": ratio,
        # Its CPU per job over its whole drain, against the worker's per run above: what the
        # same two cores can give each.
        "pgqueuer_process_cpu_ms_per_job": pgq.get("process_cpu_ms_per_job"),
        "pgqueuer_backend_cpu_ms_per_job": pgq.get("backend_cpu_ms_per_job"),
        **{key: ceilings.get(key) for key in (
            "cpu_ms_per_run", "pgqueuer_cpu_ms_per_job", "cpu_ceiling_runs_per_s",
            "pgqueuer_cpu_ceiling_jobs_per_s", "ratio_of_cpu_ceilings",
            "goal_cpu_ms_per_run_on_every_core")},
        "pgqueuer_bounded_jobs_per_s": round(bounded_rate, 1) if bounded_rate else None,
        "ratio_vs_pgqueuer_bounded": bounded_ratio,
        "ratio_vs_floor": round(figures["runs_per_s"] / floor, 3),
        "goal_ratio_vs_pgqueuer": 1.2,
        "pickup_p50_ms": figures["pickup_p50_ms"],
        "pickup_p95_ms": figures["pickup_p95_ms"],
        "pickup_p99_ms": figures["pickup_p99_ms"],
        "pickup_from_commit_ack_p50_ms": figures["pickup_from_commit_ack_p50_ms"],
        "goal_pickup_p50_ms": 3.0,
        "run_latency_p50_ms": figures["run_latency_p50_ms"],
        "span_s": figures["span_s"],
        "wall_with_startup_s": figures["wall_with_startup_s"],
        "enqueue_runs_per_s": figures["enqueue_runs_per_s"],
        "worker_cpu_ms_per_run": figures.get("worker_cpu_ms_per_run"),
        "pg_backend_cpu_ms_per_run": figures.get("pg_backend_cpu_ms_per_run"),
        # With pg_stat_statements loaded (bench/statements.py): Postgres's execution time and
        # WAL per run of the drain, and per job of pgqueuer's (unbounded) drain.
        **{key: figures.get(key) for key in ("pg_exec_us_per_run", "pg_wal_records_per_run",
                                             "pg_wal_bytes_per_run")},
        **{key: pgq.get(key) for key in ("pg_exec_us_per_job", "pg_wal_records_per_job",
                                         "pg_wal_bytes_per_job")},
        "machine_busy_pct": figures.get("machine_busy_pct"),
        "round_trips_per_run": figures.get("round_trips_per_run"),
        "claim_batch_mean": figures.get("claim_batch_mean"),
        **{key: figures.get(key) for key in ("claim_in_flight_share", "journal_in_flight_share",
                                             "claim_or_journal_in_flight_share",
                                             "worker_cpu_share")},
        "serial_runs_per_s": figures.get("serial_runs_per_s"),
        "serial_worker_cpu_ms_per_run": figures.get("serial_worker_cpu_ms_per_run"),
        "runs": args.runs,
        "events_per_run": figures["events_per_run"],
        "concurrency": args.concurrency,
        "pickup_runs": args.pickup_runs,
        "server": "url" if os.environ.get("TICKWORK_DATABASE_URL") else "embedded",
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
