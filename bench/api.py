"""bench/api.py: run starts per second through one real `tickwork api` process, beside /healthz.

A scratch database gets a tenant, its token and one active agent; `python -m tickwork.cli api`
serves it on a free loopback port with default settings. The load comes from `wrk` (compiled,
from the Debian archive: `apt-get install -y wrk`), so the generator is not the bottleneck:
for each concurrency (16 and 64 by default) it drives `POST /v1/agents/{id}/runs` (body {},
Bearer token, no Idempotency-Key: every request is a new run) and then `GET /healthz` on the
same server, each for --seconds. Printed per phase: requests/s, latency p50/p95/p99 (ms),
non-2xx responses and socket errors, the API process's CPU (% of one core) and the whole
machine's busy %. After the run-start phases the executions and queue tasks in the database
are counted (each 202 must be one of each). --py-spy records the API process during the last
run-start phase and prints the frames it spent most time in.

    TICKWORK_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/api.py

Without TICKWORK_DATABASE_URL the bench starts its own embedded Postgres. Last line: JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/scratch.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from scratch import (ROOT, BenchProcess, busy_pct, describe_server, machine_cpu,  # noqa: E402
                     process_cpu_s, say, scratch_database)
from tickwork.scheduler.tokens import create_token  # noqa: E402
from tickwork.sql.db import connect  # noqa: E402
from tickwork.sql.ids import new_id  # noqa: E402
from tickwork.sql.migrate import migrate  # noqa: E402

SCRATCH_DB = "tickwork_bench_api"
# wrk's script: the request, and at the end one JSON line with the latency percentiles (µs).
WRK_SCRIPT = """
wrk.method = "%(method)s"
wrk.body = %(body)s
wrk.headers["Content-Type"] = "application/json"
%(auth)s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %%d, "duration_us": %%d, "p50": %%d, "p95": %%d, "p99": %%d, ' ..
    '"max": %%d, "non_2xx": %%d, "socket_errors": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), latency.max, e.status, e.connect + e.read + e.write + e.timeout))
end
"""
COUNTS = """
SELECT (SELECT count(*) FROM executions) AS executions,
       (SELECT count(*) FROM queue_tasks) AS tasks
"""


class ApiProcess(BenchProcess):
    name = "API"


def other_python(root: Path) -> Path:
    """The Python of another checkout's own virtualenv (`pip install -e .` there): the package
    maps tickwork.scheduler to that checkout's folders, which PYTHONPATH alone cannot do."""
    python = root.resolve() / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"--api-root {root}: no {python}; make one there with "
                         "`python3 -m venv .venv && .venv/bin/pip install -e .`")
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def setup(url: str) -> tuple[str, str]:
    """A tenant's token and one active agent: (token, agent id)."""
    conn = await connect(url, application_name="tickwork-bench")
    try:
        token = await create_token(conn, tenant="bench")
        cursor = await conn.execute("SELECT id FROM tenants WHERE name = 'bench'")
        tenant = await cursor.fetchone()
        agent_id = new_id()
        await conn.execute("INSERT INTO agents (id, tenant_id, name, instructions) "
                           "VALUES (%s, %s, 'bench-agent', 'Answer briefly.')",
                           (agent_id, tenant["id"]))
    finally:
        await conn.close()
    return token, str(agent_id)


def wait_ready(base: str, api: ApiProcess) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        api.check_alive()
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the API did not answer /healthz within 30 s")


def run_wrk(url: str, script: Path, clients: int, seconds: float, threads: int) -> dict:
    out = subprocess.run(["wrk", f"-t{min(threads, clients)}", f"-c{clients}",
                          f"-d{seconds:g}s", "--timeout", "10s", "-s", str(script), url],
                         capture_output=True, text=True, timeout=seconds + 60)
    line = next((l for l in out.stdout.splitlines() if l.startswith("WRKJSON ")), None)
    if line is None:
        raise SystemExit(f"wrk printed no result:\n{out.stdout}\n{out.stderr}")
    return json.loads(line[len("WRKJSON "):])


def backend_pids(url: str) -> list[int]:
    """The API's Postgres backends (its pool), by application_name."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'tickwork-api'").fetchall()]


def cpu_of(pids: list[int]) -> float | None:
    values = [process_cpu_s(pid) for pid in pids]
    return None if not values or any(v is None for v in values) else sum(values)


def per_request_ms(before: float | None, after: float | None, requests: int) -> float | None:
    if before is None or after is None or not requests:
        return None
    return round(1000 * (after - before) / requests, 3)


def phase(name: str, url: str, script: Path, clients: int, args, api: ApiProcess) -> dict:
    pids = backend_pids(args.database_url)
    cpu_before, machine_before = process_cpu_s(api.pid), machine_cpu()
    pg_before = cpu_of(pids)
    found = run_wrk(url, script, clients, args.seconds, args.threads)
    cpu_after, machine_after = process_cpu_s(api.pid), machine_cpu()
    pg_after = cpu_of(pids)  # backends the pool opened during the phase are not counted
    api.check_alive()
    seconds = found["duration_us"] / 1e6
    ok = found["requests"] - found["non_2xx"]
    result = {
        "per_s": round(ok / seconds, 1),
        "p50_ms": round(found["p50"] / 1000, 2), "p95_ms": round(found["p95"] / 1000, 2),
        "p99_ms": round(found["p99"] / 1000, 2), "max_ms": round(found["max"] / 1000, 1),
        "ok": ok, "non_2xx": found["non_2xx"], "socket_errors": found["socket_errors"],
        "api_cpu_pct": (round(100 * (cpu_after - cpu_before) / seconds, 1)
                        if cpu_before is not None and cpu_after is not None else None),
        # CPU per answered request: the figure that the machine's other users disturb least.
        "api_cpu_ms_per_request": per_request_ms(cpu_before, cpu_after, found["requests"]),
        "pg_cpu_ms_per_request": per_request_ms(pg_before, pg_after, found["requests"]),
        "machine_busy_pct": busy_pct(machine_before, machine_after),
        "load_1min": round(os.getloadavg()[0], 2)}
    say(f"{name:<12} c={clients:<3} {result['per_s']:>8.1f}/s  p50 {result['p50_ms']:>7.2f} ms  "
        f"p95 {result['p95_ms']:>7.2f} ms  p99 {result['p99_ms']:>7.2f} ms  "
        f"non-2xx {result['non_2xx']}  socket errors {result['socket_errors']}  "
        f"API CPU {result['api_cpu_pct']}% ({result['api_cpu_ms_per_request']} ms/request, "
        f"its Postgres backends {result['pg_cpu_ms_per_request']} ms)  "
        f"machine busy {result['machine_busy_pct']}%  load {result['load_1min']}")
    return result


def py_spy_top(raw: Path, limit: int = 12) -> tuple[list, list]:
    """From py-spy's raw (collapsed) stacks: the functions the process spent its own CPU in
    (leaf frames), and the project's and its drivers' functions by inclusive share."""
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not samples.isdigit() or not stack:
            continue
        n, frames = int(samples), [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        total += n
        leaf[frames[-1]] += n
        for frame in set(frames):
            if re.search(r"\((scheduler|sql|psycopg|psycopg_pool|uvicorn|h11|httptools)/", frame):
                inclusive[frame] += n
    share = (lambda counts: [(f, round(100 * c / total, 1)) for f, c in counts.most_common(limit)])
    return (share(leaf), share(inclusive)) if total else ([], [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="16,64", help="concurrencies, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--api-root", type=Path, default=None,
                        help="serve the API from another checkout of tickwork (e.g. a git "
                             "worktree of an older commit, with its own .venv), for a "
                             "before/after in one hour")
    parser.add_argument("--py-spy", dest="py_spy", action="store_true",
                        help="record the API during the last run-start phase")
    parser.add_argument("--py-spy-raw", dest="py_spy_raw", type=Path, default=None,
                        help="also keep py-spy's raw (collapsed) stacks in this file")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/api.py needs wrk on the PATH (apt-get install -y wrk)")
    clients = [int(c) for c in args.clients.split(",")]
    with scratch_database(SCRATCH_DB) as url, tempfile.TemporaryDirectory() as tmp:
        describe_server(url, ("synchronous_commit", "max_connections"))
        migrate(url)
        token, agent_id = asyncio.run(setup(url))
        args.database_url = url
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "TICKWORK_DATABASE_URL": url}
        python = [sys.executable]
        if args.api_root is not None:
            # -P: not this checkout's folder (the working directory) ahead of that one's.
            python = [str(other_python(args.api_root)), "-P"]
            say(f"API served from {args.api_root} ({python[0]})")
        api = ApiProcess(python + ["-m", "tickwork.cli", "api", "--port", str(port)], env,
                         Path(tmp) / "api.log")
        try:
            wait_ready(base, api)
            post = Path(tmp) / "post.lua"
            auth = f'wrk.headers["Authorization"] = "Bearer {token}"'
            post.write_text(WRK_SCRIPT % {"method": "POST", "body": '"{}"', "auth": auth})
            get = Path(tmp) / "get.lua"
            get.write_text(WRK_SCRIPT % {"method": "GET", "body": "nil", "auth": ""})
            runs_url = f"{base}/v1/agents/{agent_id}/runs"
            # A short warm-up so the pool has opened its connections before anything is timed.
            run_wrk(runs_url, post, 8, 2, args.threads)
            with psycopg.connect(url) as conn:
                before = conn.execute(COUNTS).fetchone()
            results: dict[str, dict] = {}
            started_ok = 0
            for i, c in enumerate(clients):
                spy = None
                if args.py_spy and i == len(clients) - 1:
                    spy_out = Path(tmp) / "api.spy"
                    py_spy = str(Path(sys.executable).with_name("py-spy"))
                    spy = subprocess.Popen([py_spy, "record", "--pid", str(api.pid), "--format",
                                            "raw", "--duration", f"{int(args.seconds)}",
                                            "-o", str(spy_out), "--nonblocking"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                results[f"run_start_c{c}"] = phase("run start", runs_url, post, c, args, api)
                started_ok += results[f"run_start_c{c}"]["ok"]
                if spy is not None:
                    spy.wait(timeout=60)
                    if args.py_spy_raw is not None:
                        shutil.copyfile(spy_out, args.py_spy_raw)
                    own, inclusive = py_spy_top(spy_out)
                    say("py-spy, API process: own CPU by function (leaf frames)")
                    for frame, share in own:
                        say(f"  {share:5.1f}%  {frame[:150]}")
                    say("py-spy, API process: inclusive, project and driver functions")
                    for frame, share in inclusive:
                        say(f"  {share:5.1f}%  {frame[:150]}")
                results[f"healthz_c{c}"] = phase("healthz", f"{base}/healthz", get, c, args, api)
            with psycopg.connect(url) as conn:
                after = conn.execute(COUNTS).fetchone()
        finally:
            api.stop()
    new_runs, new_tasks = after[0] - before[0], after[1] - before[1]
    # wrk stops with requests in flight: those may have committed without being counted as 202s.
    # Every 202 is a committed run with its one task; the excess committed after wrk stopped
    # counting (it does not count responses still in flight when a phase ends).
    consistent = new_runs == new_tasks and new_runs >= started_ok
    say(f"executions added {new_runs}, queue tasks added {new_tasks}, 202 responses "
        f"{started_ok} ({new_runs - started_ok} committed after wrk stopped counting): "
        f"{'consistent' if consistent else 'NOT CONSISTENT'}")
    summary = {"bench": "api", "api_root": str(args.api_root or ROOT),
               "load_average": [round(v, 2) for v in os.getloadavg()],
               "cpus": os.cpu_count(), "seconds_per_phase": args.seconds,
               "consistent": consistent}
    for c in clients:
        run, health = results[f"run_start_c{c}"], results[f"healthz_c{c}"]
        summary[f"c{c}"] = {"run_starts_per_s": run["per_s"], "run_start_p50_ms": run["p50_ms"],
                            "run_start_p95_ms": run["p95_ms"], "run_start_p99_ms": run["p99_ms"],
                            "run_start_non_2xx": run["non_2xx"],
                            "api_cpu_pct": run["api_cpu_pct"],
                            "api_cpu_ms_per_run_start": run["api_cpu_ms_per_request"],
                            "pg_cpu_ms_per_run_start": run["pg_cpu_ms_per_request"],
                            "machine_busy_pct": run["machine_busy_pct"],
                            "load_1min": run["load_1min"],
                            "healthz_per_s": health["per_s"], "healthz_p50_ms": health["p50_ms"],
                            "healthz_p95_ms": health["p95_ms"], "healthz_p99_ms": health["p99_ms"],
                            "healthz_api_cpu_ms": health["api_cpu_ms_per_request"]}
    summary["run_starts_per_s"] = summary[f"c{clients[0]}"]["run_starts_per_s"]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
