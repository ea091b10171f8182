"""bench/inflight.py: how many runs ONE worker process holds in flight, and what they cost.

N runs, each a scripted model turn that sleeps (5 s by default) and then answers, are queued
in one transaction while a single `tickwork worker --concurrency N` waits for work. Ideal time
is the sleep itself (every run waits at once); actual time is from the queueing commit to the
last run's finish, both on the database clock. Prints efficiency (ideal / actual), the peak
number of connections the worker's pool had open (pg_stat_activity by application_name,
sampled every 0.1 s), the worker's peak RSS and RSS per in-flight run (peak minus the idle
worker's RSS, over N). Exactly-once is checked: N run_start events and N completed runs.

    TICKWORK_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/inflight.py --runs 1000

Without TICKWORK_DATABASE_URL the bench starts its own embedded Postgres. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/scratch.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from scratch import (WorkerProcess, busy_pct, describe_server, machine_cpu,  # noqa: E402
                     process_cpu_s, say, scratch_database)
from tickwork.sql.ids import new_id  # noqa: E402
from tickwork.sql.migrate import migrate  # noqa: E402
from tickwork.worker.tools.publish import publish_catalog  # noqa: E402

SCRATCH_DB = "tickwork_bench_inflight"
STALL_SECONDS = 60.0
# Every run queued at one commit, as a burst of cron fires would queue them.
ENQUEUE = """
WITH inserted AS (
    INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,
                            scheduled_for, max_attempts, timeout_minutes, input)
    SELECT gen_random_uuid(), %(tenant_id)s, %(agent_id)s, 'run', 'api', now(), 1, 5,
           %(input)s
      FROM generate_series(1, %(runs)s)
    RETURNING id
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT id::text, 'run', id FROM inserted
    RETURNING 1
)
SELECT count(*) AS queued, pg_notify('tickwork_tasks', 'run') AS notified FROM queued
"""
PROGRESS = """
SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')) AS done,
       (SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'tickwork-worker') AS pool,
       (SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE 'tickwork-%%'
           AND application_name <> 'tickwork-worker') AS other
  FROM executions
"""
# What the worker's sessions wait on, sampled with the progress (where the time goes).
WAITS = """
SELECT coalesce(wait_event_type || ':' || wait_event, state) AS wait, count(*)
  FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = 'tickwork-worker'
   AND state <> 'idle'
 GROUP BY 1
"""
# The worker's pooled sessions, whose backends' CPU the timeline adds up (a local server only).
POOL_PIDS = """
SELECT pid FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = 'tickwork-worker'
"""
VERDICT = """
SELECT count(*) FILTER (WHERE status = 'completed' AND outcome = 'done') AS completed,
       (SELECT count(*) FROM run_events WHERE type = 'run_start') AS run_starts,
       extract(epoch FROM max(finished_at) - %(queued_at)s) AS actual_s,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - %(queued_at)s)) AS start_p50_s,
       extract(epoch FROM max(started_at) - %(queued_at)s) AS start_max_s,
       extract(epoch FROM min(finished_at) - %(queued_at)s) AS finish_first_s,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM finished_at - %(queued_at)s)) AS finish_p50_s,
       (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM ts - %(queued_at)s))
          FROM run_events WHERE type = 'step_start') AS step_start_p99_s
  FROM executions
"""


def setup(url: str) -> tuple[object, object]:
    migrate(url)
    publish_catalog(url)
    tenant_id, agent_id = new_id(), new_id()
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'bench')", (tenant_id,))
        conn.execute("INSERT INTO agents (id, tenant_id, name, instructions) "
                     "VALUES (%s, %s, 'bench-agent', 'Answer briefly.')", (agent_id, tenant_id))
    return tenant_id, agent_id


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} for process {pid}")


class CpuTimeline:
    """CPU of the worker and of its pooled backends, sampled with the progress, so a phase
    (the burst's start) can be cut out afterwards: which side was busy, and which waited for
    the other. The backends' CPU is read from /proc, so it is None for a server on another
    host (or processes this user cannot read)."""

    def __init__(self, worker_pid: int) -> None:
        self._worker_pid = worker_pid
        self._backend_cpu: dict[int, float] = {}  # last CPU seen per backend pid
        self._backends_total = 0.0
        self._readable = True
        self.samples: list[tuple[float, float, float | None, tuple[float, float] | None]] = []

    def sample(self, pool_pids: list[int]) -> None:
        for pid in pool_pids:
            cpu = process_cpu_s(pid)
            if cpu is None:
                self._readable = False
                continue
            # A backend first seen after the start counts whole: it was opened for the burst.
            self._backends_total += cpu - self._backend_cpu.get(pid, 0.0 if self.samples else cpu)
            self._backend_cpu[pid] = cpu
        self.samples.append((time.monotonic(), process_cpu_s(self._worker_pid) or 0.0,
                             self._backends_total if self._readable else None, machine_cpu()))

    def between(self, start: float, end: float) -> dict[str, float | None]:
        """% of one core the worker and its backends used from ``start`` to ``end``
        (monotonic), and how busy the whole machine was, from the samples nearest them."""
        first = min(self.samples, key=lambda s: abs(s[0] - start), default=None)
        last = min(self.samples, key=lambda s: abs(s[0] - end), default=None)
        span = last[0] - first[0] if first and last else 0.0
        if span <= 0:  # fewer than two samples inside the phase
            return {"worker_cpu_pct": None, "backends_cpu_pct": None, "machine_busy_pct": None}
        backends = (None if first[2] is None or last[2] is None
                    else round(100 * (last[2] - first[2]) / span, 1))
        return {"worker_cpu_pct": round(100 * (last[1] - first[1]) / span, 1),
                "backends_cpu_pct": backends, "machine_busy_pct": busy_pct(first[3], last[3])}


def wait_for_worker(url: str, worker: WorkerProcess) -> None:
    """Until the worker's pool and listener are connected (it is idle and listening)."""
    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            worker.check_alive()
            listening = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'tickwork-worker-listen'").fetchone()[0]
            if listening:
                return
            time.sleep(0.1)
    raise SystemExit("the worker never started listening")


def measure(url: str, args: argparse.Namespace) -> dict:
    tenant_id, agent_id = setup(url)
    run_input = Jsonb({"script": [{"sleep": args.sleep}, {"text": "ok"}]})
    log_path = Path(tempfile.gettempdir()) / "tickwork-bench-inflight-worker.log"
    os.environ["TICKWORK_POOL_MAX_SIZE"] = str(args.pool_max_size)
    worker = WorkerProcess(url, args.runs, log_path)
    try:
        wait_for_worker(url, worker)
        time.sleep(0.5)  # let the idle worker settle before its baseline
        idle_rss = rss_kb(worker.pid)
        profiler = None
        if args.py_spy:  # collapsed stacks of the worker while the runs are in flight
            idle = ["--idle"] if args.py_spy_format == "speedscope" else []
            profiler = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record",
                                         "-p", str(worker.pid), "-r", str(args.py_spy_rate),
                                         "--format", args.py_spy_format, *idle,
                                         "-o", args.py_spy], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached before the runs are queued
        peak_rss, peak_pool, peak_other, done = idle_rss, 0, 0, 0
        cpu_before = process_cpu_s(worker.pid)
        waits: dict[str, int] = {}
        with psycopg.connect(url, autocommit=True) as conn:
            timeline = CpuTimeline(worker.pid)
            timeline.sample([row[0] for row in conn.execute(POOL_PIDS).fetchall()])
            with conn.transaction():
                conn.execute(ENQUEUE, {"tenant_id": tenant_id, "agent_id": agent_id,
                                       "input": run_input, "runs": args.runs})
                queued_at = conn.execute("SELECT clock_timestamp()").fetchone()[0]
            queued_mono = time.monotonic()
            say(f"queued {args.runs:,} runs at once; worker idle RSS {idle_rss / 1024:.1f} MB")
            last_change = time.monotonic()
            while done < args.runs:
                time.sleep(0.1)
                worker.check_alive()
                now_done, pool, other = conn.execute(PROGRESS).fetchone()
                peak_pool, peak_other = max(peak_pool, pool), max(peak_other, other)
                peak_rss = max(peak_rss, rss_kb(worker.pid))
                for wait, count in conn.execute(WAITS).fetchall():
                    waits[wait] = waits.get(wait, 0) + count
                timeline.sample([row[0] for row in conn.execute(POOL_PIDS).fetchall()])
                if now_done != done:
                    done, last_change = now_done, time.monotonic()
                elif time.monotonic() - last_change > STALL_SECONDS + args.sleep:
                    raise SystemExit(f"stalled at {done:,} of {args.runs:,} runs")
            peak_rss = max(peak_rss, rss_kb(worker.pid, "VmHWM"))
            worker_cpu_s = process_cpu_s(worker.pid) - cpu_before
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(timeout=30)
                say(f"py-spy: collapsed stacks in {args.py_spy}")
            verdict = conn.execute(VERDICT, {"queued_at": queued_at}).fetchone()
    finally:
        worker.stop()
    (completed, run_starts, actual_s, start_p50_s, start_max_s, finish_first_s, finish_p50_s,
     step_start_p99_s) = verdict
    if completed != args.runs or run_starts != args.runs:
        raise SystemExit(f"expected {args.runs} completed runs and run_start events, got "
                         f"{completed} and {run_starts}")
    actual_s = float(actual_s)
    # The burst's start: from the queueing commit to the last run's start (0.1 s samples).
    start_phase = timeline.between(queued_mono, queued_mono + float(start_max_s))
    return {
        "runs_in_flight": args.runs, "sleep_s": args.sleep, "ideal_s": args.sleep,
        "actual_s": round(actual_s, 3), "efficiency": round(args.sleep / actual_s, 3),
        "start_p50_s": round(float(start_p50_s), 3), "start_max_s": round(float(start_max_s), 3),
        # when the model waits began (step_start stored) and when the runs ended
        "step_start_stored_p99_s": round(float(step_start_p99_s), 3),
        "finish_first_s": round(float(finish_first_s), 3),
        "finish_p50_s": round(float(finish_p50_s), 3),
        "pool_max_size": args.pool_max_size, "peak_pool_connections": peak_pool,
        "peak_other_worker_connections": peak_other,
        "idle_rss_mb": round(idle_rss / 1024, 1), "peak_rss_mb": round(peak_rss / 1024, 1),
        "rss_kb_per_inflight_run": round((peak_rss - idle_rss) / args.runs, 1),
        "worker_cpu_s": round(worker_cpu_s, 2),
        # % of one core while the runs started: both sides well below 100 means each waited
        # for the other (round trips, commits); one near 100 is the one that limits the start.
        "start_phase_worker_cpu_pct": start_phase["worker_cpu_pct"],
        "start_phase_backends_cpu_pct": start_phase["backends_cpu_pct"],
        "start_phase_machine_busy_pct": start_phase["machine_busy_pct"],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        # busy worker sessions seen per wait event, summed over the 0.1 s samples
        "worker_waits": dict(sorted(waits.items(), key=lambda kv: -kv[1])[:6]),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000, help="runs in flight (= concurrency)")
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each model turn waits")
    parser.add_argument("--pool-max-size", type=int, default=10,
                        help="TICKWORK_POOL_MAX_SIZE for the worker")
    parser.add_argument("--py-spy-rate", type=int, default=50, metavar="HZ",
                        help="py-spy's samples per second (default 50)")
    parser.add_argument("--py-spy-format", choices=("raw", "speedscope"), default="raw",
                        help="raw: collapsed stacks; speedscope: every sample in time order, "
                             "idle ones too, so the start phase can be cut out of it")
    parser.add_argument("--py-spy", metavar="PATH",
                        help="record the worker with py-spy into PATH (--py-spy-format)")
    args = parser.parse_args()
    if args.runs < 1 or args.sleep <= 0 or args.pool_max_size < 1:
        parser.error("--runs and --pool-max-size must be at least 1 and --sleep above 0")
    return args


def main() -> None:
    args = parse_args()
    with scratch_database(SCRATCH_DB) as url:
        describe_server(url, ("max_connections", "synchronous_commit"))
        figures = measure(url, args)
    say(f"efficiency {figures['efficiency']:.3f} ({figures['ideal_s']:g} s ideal, "
        f"{figures['actual_s']:.2f} s actual; starts p50 {figures['start_p50_s']:.2f} s, "
        f"last {figures['start_max_s']:.2f} s; step_start stored p99 "
        f"{figures['step_start_stored_p99_s']:.2f} s; finishes from "
        f"{figures['finish_first_s']:.2f} s, p50 {figures['finish_p50_s']:.2f} s)")
    say(f"connections: pool peak {figures['peak_pool_connections']} of "
        f"{figures['pool_max_size']}, other worker connections {figures['peak_other_worker_connections']}")
    say(f"worker CPU {figures['worker_cpu_s']} s over the run; while the runs started, % of one "
        f"core: the worker {figures['start_phase_worker_cpu_pct']}, its backends "
        f"{figures['start_phase_backends_cpu_pct']} (machine "
        f"{figures['start_phase_machine_busy_pct']} % busy)")
    say(f"worker sessions waiting (samples): {figures['worker_waits']}; "
        f"load {figures['load_average']}")
    say(f"RSS: idle {figures['idle_rss_mb']} MB, peak {figures['peak_rss_mb']} MB, "
        f"{figures['rss_kb_per_inflight_run']} kB per in-flight run")
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
