"""Soak (issue 9 item 8): a sustained load for a chosen time; per window the run rate, pickup
latency, table sizes, dead tuples and process RSS; at the end whether any table grows without bound.

Run from the repo root:  .venv/bin/python bench/soak.py [--minutes 30] [--schedules 100000]
    [--api-rate 5] [--schedulers 2] [--workers 2] [--concurrency 32] [--report-every 300]
    [--retention-minutes 2] [--keep]

It always starts its OWN embedded Postgres in a fresh /tmp folder (TICKWORK_DATABASE_URL is
ignored; never the shared server), migrates it with `tickwork migrate`, and starts real
processes through bench/chaos_fleet.py: one `tickwork api`, 1-2 `tickwork scheduler`, 1-2
`tickwork worker`. Nothing is killed; this is about what accumulates.

- Load: --schedules schedules firing every --every-minutes minutes (schedule n at the minutes
  that are n modulo K: `n%K-59/K * * * *`, so about schedules/K fire in each minute; 100,000
  every 8 minutes is ~208 runs/s; K = 1 makes them all `* * * * *`), one agent each, overlap
  skip, input: one scripted model turn, written with COPY straight into the bench's own
  database (100,000 through the API would take longer than the soak), fired by the
  schedulers' own minute tick; plus
  --api-rate runs per second through `POST /v1/agents/{id}/runs` from one client thread.
- Retention: the scheduler's horizon is TICKWORK_RETENTION_DAYS, whole days, at least 1 for the
  scheduler process (the HTTP tick's retention_upkeep refuses under 7), so in a soak of minutes
  the processes' own retention finds nothing old enough. The schedulers run with
  TICKWORK_RETENTION_DAYS=1 (the least they allow), and beside them the bench calls the
  scheduler's own retention, scheduler.retention.trim_retention (what each minute tick calls:
  batches within TICKWORK_RETENTION_BUDGET_SECONDS), once per scheduler per minute, 5 s after
  the tick, with its injected `now` set one day minus --retention-minutes ahead of the database
  clock and retention_days=1: the same statements, batch size, budget and cadence as the
  processes, over a horizon of --retention-minutes instead of a day.
- Per window (--report-every seconds): runs/s completed, pickup p50/p99 (started_at -
  created_at of runs started in the window; sampled every 10 s, before retention can remove
  them), rows, heap+toast and index bytes, dead tuples of each table (run_events summed over its
  partitions), RSS of every process from /proc.
- Verdict per table, over the windows after the horizon has passed (at least the last two):
  rows kept per completed run (row slope / run rate) and bytes per run. "growing" when more than
  0.02 rows per run are kept, or bytes rose in every one of those windows (three at least) by
  more than 64 bytes per run; otherwise "level". The journal (run_events) is dropped a month
  at a time, so within a soak it keeps each run's own events: "by_month" while, counted once
  the fleet has stopped, it holds no more than a one-turn run's 5 rows per run; else "growing".

Readable lines go to stdout as it runs; the very last line is one JSON object. Exit status 1 when
a table grows without bound or a process exited on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from croniter import croniter

from chaos_fleet import (API_RETRIES, Fleet, call, free_port, run_in_scratch,
                         start_scratch_database, tickwork, wait_healthy)
from scratch import busy_pct, machine_cpu, say  # bench/scratch.py

DB_NAME = "tickwork_soak"
RUN_INPUT = {"script": [{"text": "ok"}]}  # one scripted model turn
TABLES = ("executions", "run_events", "queue_tasks", "execution_claims", "skipped_fires",
          "tool_results", "tool_call_results", "run_states", "webhook_deliveries", "schedules")
HOT = ("executions", "run_events", "queue_tasks", "execution_claims", "schedules")
SAMPLE_EVERY_S = 10.0
COMMIT_LAG_S = 5.0  # a run is counted once its started_at is this old: its commit is visible
GROWING_ROWS_PER_RUN = 0.02
# The journal is dropped a month at a time (migration 0055), never row by row, so within a soak
# it keeps every run's own events: a one-turn run's run_start, step_start, content_delta,
# gate_decision and run_complete. Its verdict is "by_month" while, counted exactly once the
# fleet has stopped, it holds no more rows per run than those (a run cut off holds fewer);
# the slope per completed run is only reported: runs in flight at a window's edges skew it.
JOURNAL = "run_events"
JOURNAL_EVENTS_PER_RUN = 5
JOURNAL_COUNT = "SELECT count(*), count(DISTINCT execution_id) FROM run_events"
GROWING_BYTES_PER_RUN = 64.0


# --- load -----------------------------------------------------------------------------------------

def cron_every(n: int, minutes: int) -> str:
    """Schedule n's cron: every ``minutes`` minutes, at the minutes that are n modulo it."""
    return "* * * * *" if minutes == 1 else f"{n % minutes}-59/{minutes} * * * *"


def first_fires(minutes: int, first: datetime) -> dict[str, datetime]:
    """Each of the ``minutes`` crons' first fire at or after ``first`` (a whole minute)."""
    crons = {cron_every(n, minutes) for n in range(minutes)}
    return {cron: croniter(cron, first - timedelta(seconds=1)).get_next(datetime)
            for cron in crons}


def create_schedules(url: str, tenant: str, count: int, every_minutes: int) -> str:
    """``count`` agents with one schedule each (every ``every_minutes`` minutes, spread), by
    COPY; returns one more agent's id for the API's runs."""
    with psycopg.connect(url) as conn:
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = %s", (tenant,)).fetchone()[0]
        api_agent = uuid.uuid4()
        conn.execute("INSERT INTO agents (id, tenant_id, name) VALUES (%s, %s, 'soak-api')",
                     (api_agent, tenant_id))
        first = conn.execute("SELECT date_trunc('minute', now()) + interval '1 minute'"
                             ).fetchone()[0]
        agent_ids = [uuid.uuid4() for _ in range(count)]
        with conn.cursor().copy("COPY agents (id, tenant_id, name) FROM STDIN") as copy:
            for n, agent_id in enumerate(agent_ids):
                copy.write_row((agent_id, tenant_id, f"soak-{n}"))
        script = json.dumps(RUN_INPUT)
        with conn.cursor().copy("COPY schedules (id, tenant_id, agent_id, cron, timeout_minutes,"
                                " overlap, input, next_run) FROM STDIN") as copy:
            fires = first_fires(every_minutes, first)
            for n, agent_id in enumerate(agent_ids):
                cron = cron_every(n, every_minutes)
                copy.write_row((uuid.uuid4(), tenant_id, agent_id, cron, 1, "skip", script,
                                fires[cron]))
        conn.execute("ANALYZE agents")
        conn.execute("ANALYZE schedules")
    return str(api_agent)


class ApiLoad(threading.Thread):
    """POST /v1/agents/{id}/runs at a steady rate from one client (retrying 503s as chaos does)."""

    def __init__(self, base: str, token: str, agent_id: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.base, self.token, self.agent_id, self.rate = base, token, agent_id, rate
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []
        self.behind_s = 0.0  # how far the client fell behind its schedule at most

    def run(self) -> None:
        if self.rate <= 0:
            return
        interval = 1 / self.rate
        due = time.monotonic()
        with httpx.Client(base_url=self.base, timeout=30,
                          headers={"Authorization": f"Bearer {self.token}"}) as client:
            while not self.stop.is_set():
                try:
                    call(client, "POST", f"/v1/agents/{self.agent_id}/runs",
                         json={"input": RUN_INPUT, "timeout_minutes": 1})
                    self.sent += 1
                except (SystemExit, httpx.HTTPError) as exc:
                    self.errors.append(str(exc)[:200])
                due += interval
                lag = time.monotonic() - due
                self.behind_s = max(self.behind_s, lag)
                if lag < 0:
                    self.stop.wait(-lag)
                elif lag > 5:
                    due = time.monotonic()  # do not burst to catch up after a stall


class Retention(threading.Thread):
    """The scheduler's own retention (scheduler.retention.trim_retention), once per scheduler per
    minute, with its clock moved so that a 1-day horizon ends --retention-minutes ago."""

    def __init__(self, url: str, calls_per_minute: int, horizon_minutes: float,
                 batch_size: int) -> None:
        super().__init__(daemon=True)
        self.url, self.calls, self.batch_size = url, calls_per_minute, batch_size
        self.shift = timedelta(days=1) - timedelta(minutes=horizon_minutes)
        self.stop = threading.Event()
        self.rounds = 0
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(self._until_next_minute()):
            try:
                asyncio.run(self._round())
                self.rounds += 1
            except Exception as exc:  # reported at the end; the soak goes on
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])

    @staticmethod
    def _until_next_minute() -> float:
        return 60 - (time.time() % 60) + 5  # 5 s after the schedulers' tick at second 0

    async def _round(self) -> None:
        from tickwork.scheduler.settings import SchedulerSettings
        from tickwork.scheduler.retention import trim_retention
        from tickwork.sql.db import open_pool

        settings = SchedulerSettings(retention_days=1, retention_batch_size=self.batch_size)
        pool = await open_pool(self.url, application_name="soak-retention",
                               min_size=1, max_size=self.calls)
        try:
            async with pool.connection() as conn:
                now = (await (await conn.execute("SELECT now() AS now")).fetchone())["now"]
            await asyncio.gather(*(trim_retention(pool, settings, now=now + self.shift)
                                   for _ in range(self.calls)))
        finally:
            await pool.close()


# --- measuring ------------------------------------------------------------------------------------

class Pickups(threading.Thread):
    """Every 10 s: runs started and runs finished since the last look (by the database clock,
    COMMIT_LAG_S behind it so that every row counted has committed), before retention removes
    them."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.pickup_ms: list[float] = []
        self.completed = 0
        self.failed = 0
        self.errors: list[str] = []

    def run(self) -> None:
        conn = psycopg.connect(self.url, autocommit=True)
        mark = conn.execute("SELECT now() - make_interval(secs => %s)", (COMMIT_LAG_S,)
                            ).fetchone()[0]
        while not self.stop.wait(SAMPLE_EVERY_S):
            try:
                mark = self._sample(conn, mark)
            except psycopg.Error as exc:
                self.errors.append(str(exc)[:200])
                conn = psycopg.connect(self.url, autocommit=True)
        conn.close()

    def _sample(self, conn: psycopg.Connection, mark):
        upto = conn.execute("SELECT now() - make_interval(secs => %s)", (COMMIT_LAG_S,)
                            ).fetchone()[0]
        pickups = conn.execute(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM executions"
            " WHERE started_at > %s AND started_at <= %s", (mark, upto)).fetchall()
        done = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'completed'),"
            "       count(*) FILTER (WHERE status <> 'completed') FROM executions"
            " WHERE finished_at > %s AND finished_at <= %s", (mark, upto)).fetchone()
        with self.lock:
            self.pickup_ms.extend(float(row[0]) for row in pickups)
            self.completed += done[0]
            self.failed += done[1]
        return upto

    def take(self) -> tuple[list[float], int, int]:
        with self.lock:
            taken = (self.pickup_ms, self.completed, self.failed)
            self.pickup_ms, self.completed, self.failed = [], 0, 0
        return taken


SIZES = """
SELECT coalesce(sum(s.n_live_tup), 0)::bigint AS rows,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead,
       coalesce(sum(pg_table_size(t.relid)), 0)::bigint AS heap,
       coalesce(sum(pg_indexes_size(t.relid)), 0)::bigint AS index
  FROM (SELECT relid FROM pg_partition_tree(%(table)s::regclass) WHERE isleaf
        UNION SELECT %(table)s::regclass) t  -- a plain table is not in its own "tree"
  LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid
"""


def table_sizes(conn: psycopg.Connection) -> dict[str, dict[str, int]]:
    """Each table's rows, dead rows and bytes. Rows are counted exactly (count(*), a few ms for
    the tens of thousands a soak keeps) except the journal's, which are the statistics' live
    count (n_live_tup; the journal is counted exactly once the fleet stops): the statistics'
    figure is an estimate that autovacuum's ANALYZE resets, and moved a 12-minute soak's
    executions by 10k rows between two windows while their exact count did not."""
    sizes = {}
    for table in TABLES:
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            continue
        rows, dead, heap, index = conn.execute(SIZES, {"table": table}).fetchone()
        if table != JOURNAL:
            rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(table))).fetchone()[0]
        sizes[table] = {"rows": rows, "dead": dead, "heap": heap, "index": index}
    return sizes


def journal_count(url: str) -> dict[str, int] | None:
    """The journal's rows and the runs they belong to, once the fleet has stopped."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            rows, runs = conn.execute(JOURNAL_COUNT).fetchone()
    except psycopg.Error as exc:
        say(f"the journal could not be counted: {exc}")
        return None
    return {"rows": rows, "runs": runs}


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def human(count: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.1f}{unit}"
    return f"{count:.0f}"


def window_line(window: dict) -> str:
    parts = [f"t+{window['t_s']:4.0f}s runs/s {window['runs_per_s']:.1f}"
             f" (failed {window['failed']}) pickup p50 {window['pickup_p50_ms']} ms"
             f" p99 {window['pickup_p99_ms']} ms cpu {window['machine_busy_pct']}%"]
    for table, size in window["tables"].items():
        parts.append(f"{table} {human(size['rows'])} rows {human(size['heap'])}B"
                     f"+{human(size['index'])}B idx"
                     + (f" dead {human(size['dead'])}" if table in HOT else ""))
    parts.append("RSS MB " + " ".join(f"{k} {v}" for k, v in window["rss_mb"].items()))
    return " | ".join(parts)


# --- verdict --------------------------------------------------------------------------------------

def verdicts(windows: list[dict], settled_s: float,
             journal_rows_per_run: float | None = None) -> dict[str, dict]:
    """Per table: rows and bytes kept per completed run over the windows after ``settled_s``
    (at least the last two windows). ``journal_rows_per_run``: the journal's rows over its runs,
    counted once the fleet has stopped (the journal's verdict)."""
    if len(windows) < 2:
        return {}
    start = next((i for i, w in enumerate(windows) if w["t_s"] - w["span_s"] >= settled_s),
                 len(windows) - 2)
    start = min(start, len(windows) - 2)
    first, last = windows[start], windows[-1]
    span = [w for w in windows[start + 1:]]
    runs = sum(w["runs"] for w in span)
    found = {}
    for table in last["tables"]:
        before, after = first["tables"].get(table), last["tables"][table]
        if before is None:
            continue
        rows = after["rows"] - before["rows"]
        size = lambda s: s["heap"] + s["index"]  # noqa: E731
        grown = size(after) - size(before)
        steps = [size(b["tables"][table]) - size(a["tables"][table])
                 for a, b in zip(windows[start:], windows[start + 1:])]
        per_run = rows / runs if runs else 0.0
        bytes_per_run = grown / runs if runs else 0.0
        rising = len(steps) >= 3 and all(step > GROWING_BYTES_PER_RUN * max(w["runs"], 1)
                                         for step, w in zip(steps, span))
        if table == JOURNAL and journal_rows_per_run is not None:
            growing = journal_rows_per_run > JOURNAL_EVENTS_PER_RUN
            verdict = "growing" if growing else "by_month"
        else:
            growing = per_run > GROWING_ROWS_PER_RUN or rising
            verdict = "growing" if growing else "level"
        found[table] = {"verdict": verdict,
                        "rows_per_run": round(per_run, 4),
                        "bytes_per_run": round(bytes_per_run, 1),
                        "rows_end": after["rows"], "bytes_end": size(after),
                        "over_s": round(last["t_s"] - first["t_s"])}
    return found


# --- the soak -------------------------------------------------------------------------------------

def soak(args: argparse.Namespace, root: Path) -> dict:
    server, env = start_scratch_database(root, DB_NAME)
    url = env["TICKWORK_DATABASE_URL"]
    token = tickwork(env, "token", "create", "--tenant", "soak")
    logs = root / "logs"
    logs.mkdir()
    api_port = free_port()
    base = f"http://127.0.0.1:{api_port}"
    fleet = Fleet(url, logs, api_port, args.concurrency)
    fleet.env["TICKWORK_RETENTION_DAYS"] = "1"  # the least the scheduler process allows
    names = (["api"] + [f"scheduler-{i + 1}" for i in range(args.schedulers)]
             + [f"worker-{i + 1}" for i in range(args.workers)])
    started = time.perf_counter()
    api_agent = create_schedules(url, "soak", args.schedules, args.every_minutes)
    say(f"{args.schedules} schedules every {args.every_minutes} min (~"
        f"{args.schedules / args.every_minutes / 60:.0f} runs/s) written in "
        f"{time.perf_counter() - started:.1f}s")
    threads: list = []
    windows: list[dict] = []
    try:
        for name in names:
            fleet.start(name)
        wait_healthy(base)
        pickups = Pickups(url)
        api_load = ApiLoad(base, token, api_agent, args.api_rate)
        retention = Retention(url, args.schedulers, args.retention_minutes,
                              args.retention_batch)
        threads = [pickups, api_load, retention]
        for thread in threads:
            thread.start()
        say(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC: soak for {args.minutes:g} min: "
            f"{args.schedulers} scheduler(s), {args.workers} worker(s) (concurrency "
            f"{args.concurrency}), 1 API at {args.api_rate:g} runs/s; retention horizon "
            f"{args.retention_minutes:g} min, batch {args.retention_batch}; logs in {logs}")
        windows = measure(args, url, fleet, pickups)
    finally:
        for thread in threads:
            thread.stop.set()
        fleet.stop_all()
        journal = journal_count(url)
        server.stop()
    return {"windows": windows, "journal": journal,
            "api_sent": api_load.sent, "api_errors": api_load.errors,
            "api_behind_s": round(api_load.behind_s, 1), "retention_rounds": retention.rounds,
            "retention_errors": retention.errors, "sample_errors": pickups.errors,
            "unexpected_exits": fleet.unexpected_exits}


def measure(args: argparse.Namespace, url: str, fleet: Fleet, pickups: Pickups) -> list[dict]:
    windows = []
    begun = time.monotonic()
    cpu = machine_cpu()
    pickups.take()
    with psycopg.connect(url, autocommit=True) as conn:
        baseline = {"t_s": 0.0, "span_s": 0.0, "runs": 0, "tables": table_sizes(conn)}
        windows.append(baseline)
        next_report = args.report_every
        duration = args.minutes * 60
        while True:  # the last window ends at the duration and is reported too
            elapsed = time.monotonic() - begun
            fleet.restart_the_dead(elapsed)
            wait = min(next_report, duration) - elapsed
            if wait > 0:
                time.sleep(min(wait, 5))
                continue
            span = elapsed - windows[-1]["t_s"]
            now_cpu = machine_cpu()
            times, completed, failed = pickups.take()
            window = {
                "t_s": round(elapsed), "span_s": round(span), "runs": completed,
                "failed": failed, "runs_per_s": round(completed / span, 1) if span else 0.0,
                "pickup_p50_ms": percentile(times, 0.5), "pickup_p99_ms": percentile(times, 0.99),
                "machine_busy_pct": busy_pct(cpu, now_cpu),
                "tables": table_sizes(conn),
                "rss_mb": {name: rss_mb(proc.pid) for name, proc in fleet.procs.items()}}
            cpu = now_cpu
            windows.append(window)
            say(window_line(window))
            if elapsed >= duration:
                return windows
            next_report += args.report_every


def report(args: argparse.Namespace, result: dict) -> int:
    windows = result["windows"]
    settled = args.retention_minutes * 60 + 90  # the horizon, a tick and a retention round
    journal = result.get("journal")
    journal_per_run = journal["rows"] / journal["runs"] if journal and journal["runs"] else None
    found = verdicts(windows, settled, journal_per_run)
    if journal_per_run is not None:
        say(f"journal: {human(journal['rows'])} rows of {human(journal['runs'])} runs, "
            f"{journal_per_run:.3f} per run (dropped a month at a time)")
    for table, v in found.items():
        say(f"{table:19s} {v['verdict']:8s} {v['rows_per_run']:+.4f} rows/run "
            f"{v['bytes_per_run']:+9.1f} B/run over the last {v['over_s']}s; now "
            f"{human(v['rows_end'])} rows, {human(v['bytes_end'])}B")
    measured = windows[1:]
    runs = sum(w["runs"] for w in measured)
    span = sum(w["span_s"] for w in measured) or 1
    growing = sorted(t for t, v in found.items() if v["verdict"] == "growing")
    problems = (result["api_errors"] + result["retention_errors"] + result["sample_errors"]
                + result["unexpected_exits"])
    if problems:
        say("problems: " + " | ".join(problems[:10]))
    rss_end = windows[-1].get("rss_mb", {}) if measured else {}
    say(json.dumps({
        "minutes": args.minutes, "schedules": args.schedules,
        "every_minutes": args.every_minutes, "api_rate": args.api_rate,
        "schedulers": args.schedulers, "workers": args.workers, "concurrency": args.concurrency,
        "retention_minutes": args.retention_minutes, "retention_batch": args.retention_batch,
        "runs_completed": runs, "runs_per_s": round(runs / span, 1),
        "runs_failed": sum(w["failed"] for w in measured),
        "pickup_p50_ms_by_window": [w["pickup_p50_ms"] for w in measured],
        "pickup_p99_ms_by_window": [w["pickup_p99_ms"] for w in measured],
        "api_runs_sent": result["api_sent"], "api_errors": len(result["api_errors"]),
        "api_retries": len(API_RETRIES), "api_client_behind_s": result["api_behind_s"],
        "retention_rounds": result["retention_rounds"],
        "rss_mb_first": measured[0]["rss_mb"] if measured else {}, "rss_mb_last": rss_end,
        "journal_rows_per_run": round(journal_per_run, 3) if journal_per_run else None,
        "tables": found, "growing": growing,
        "unexpected_exits": len(result["unexpected_exits"]),
        "ok": not growing and not result["unexpected_exits"]}))
    return 0 if not growing and not result["unexpected_exits"] else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load lasts")
    parser.add_argument("--schedules", type=int, default=100_000, help="schedules")
    parser.add_argument("--every-minutes", type=int, default=8,
                        help="each schedule fires every this many minutes (1..30; spread)")
    parser.add_argument("--api-rate", type=float, default=5.0, help="API run starts per second")
    parser.add_argument("--schedulers", type=int, default=2, choices=(1, 2))
    parser.add_argument("--workers", type=int, default=2, choices=(1, 2))
    parser.add_argument("--concurrency", type=int, default=32, help="runs at once per worker")
    parser.add_argument("--report-every", type=float, default=300.0, help="seconds per window")
    parser.add_argument("--retention-minutes", type=float, default=2.0,
                        help="retention horizon the bench's retention calls use")
    parser.add_argument("--retention-batch", type=int, default=1000,
                        help="TICKWORK_RETENTION_BATCH_SIZE for those calls (the default)")
    parser.add_argument("--keep", action="store_true", help="keep the data and logs folder")
    args = parser.parse_args()
    if (args.minutes <= 0 or args.schedules < 0 or args.api_rate < 0 or args.concurrency < 1
            or args.report_every <= 0 or not 0 < args.retention_minutes < 24 * 60
            or args.retention_batch < 1):
        raise SystemExit("--minutes, --report-every, --concurrency and --retention-batch must "
                         "be positive, --retention-minutes under a day, the rest not negative")
    if not 1 <= args.every_minutes <= 30:
        raise SystemExit(f"--every-minutes must be a whole number from 1 to 30 (a cron's minute "
                         f"step), got {args.every_minutes}")
    say(f"soak: {args.schedules} schedules + {args.api_rate:g} API runs/s for {args.minutes:g} "
        f"min; {os.cpu_count()} CPUs, load average "
        + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    run_in_scratch("tickwork-soak-", args, soak, report)


if __name__ == "__main__":
    main()
