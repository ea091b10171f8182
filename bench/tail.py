"""Benchmark of the live tail: many SSE subscribers on one API process following busy runs.

Run from the repo root:  .venv/bin/python bench/tail.py  [--subscribers N] [--runs R]
                         [--concurrency C] [--turns T] [--turn-sleep S] [--rounds K]
                         [--client raw|httpx] [--profile-api]

The database is TICKWORK_DATABASE_URL when set (a scratch database ``tickwork_bench_tail`` is
created on that server and dropped at the end), else an embedded Postgres in a fresh /tmp folder.
Migrated, the tool catalog published, an admin token made with ``tickwork token create``, then
ONE ``tickwork api`` process and, per phase, ONE ``tickwork worker --concurrency C`` process.
One agent with the tool demo.get_record, created through the API.

Every run is scripted to emit events continuously: T turns of ``{"sleep": S}`` then one
demo.get_record call (step_start, tool_start, tool_complete, one journal append and one NOTIFY
per turn), then a text turn; R runs are queued through the API, all live at once when C >= R.

- phase A (no subscribers): queue R runs, start the worker, wait for all of them; the worker's
  events/s = journal rows of these runs / (first .. last event ts), so start-up is not counted.
- phase B (with subscribers): queue R runs, connect N subscribers to GET /v1/runs/{id}/events
  (half on one hot run, the rest spread over the others), wait until the API counts all of them
  as live tails and its database connections are idle (their replay is done), start the worker,
  and measure its events/s the same way. Every frame a client
  receives is timed (time.time() when its last byte was read); latency = that - the moment the
  worker EMITTED the event (DESIGN "Visible as it happens": within 250 ms of emission). The
  worker runs in a small wrapper that stamps time.time() at every RunJournal.emit and writes the
  stamps out when it stops (production code is not touched; same machine, same clock). run_start
  is written by the claim statement, not emitted: its latency is from its ts. The old figure,
  from ts (clock_timestamp() at the INSERT, a little before the commit) to arrival, is kept as
  ``commit_*``. Every subscriber must receive every
  event of its run, in order, exactly once (``mismatched_subscribers`` must be 0).
- Phases alternate A, B, A, B, ... (``--rounds``) and the rates are medians, so drift of a
  shared machine does not land on one side only. worker_slowdown = 1 - B/A (positive: slower).

The default client is a minimal asyncio HTTP/1.1 reader that only timestamps raw reads while
the phase runs (frames are parsed afterwards), so the bench's own CPU, which shares the
machine with the API, the worker and Postgres, stays small; ``--client httpx`` uses httpx
streaming instead. ``--profile-api`` runs the API with a sampling profiler and every statement
counted by query name, and prints where its time went.

Readable lines go to stdout as it runs; the very last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import structlog

from scratch import (ROOT, BenchProcess, WorkerProcess, busy_pct,  # bench/scratch.py
                     describe_server, machine_cpu, process_cpu_s, say, scratch_database)
from tickwork.sql.migrate import migrate
from tickwork.worker.tools.publish import publish_catalog

SCRATCH_DB = "tickwork_bench_tail"
HOST = "127.0.0.1"
TOOL = "demo.get_record"
STALL_SECONDS = 60.0  # no progress for this long: the bench gives up instead of hanging
GOAL_P99_MS = 100.0  # commit -> client
GOAL_EMIT_MS = 250.0  # emission -> client, for every event (DESIGN "Visible as it happens")
GOAL_SLOWDOWN = 0.05


def load_text() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def database_commits(url: str) -> int:
    """Committed transactions of the scratch database so far (every autocommit statement is
    one), read from pg_stat_database: what the API adds shows as the difference B - A."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(conn.execute("SELECT xact_commit FROM pg_stat_database "
                                "WHERE datname = current_database()").fetchone()[0])


# --- CPU accounting (only when the server runs on this machine) --------------------------------

def backends(url: str) -> dict[int, tuple[str, float | None]]:
    """pid -> (application_name, CPU seconds so far) of every backend of the scratch database."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT pid, application_name FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                            ).fetchall()
    return {pid: (name, process_cpu_s(pid)) for pid, name in rows}


def backend_cpu_by_app(before: dict[int, tuple[str, float | None]],
                       after: dict[int, tuple[str, float | None]]) -> dict[str, float] | None:
    """CPU seconds per application name between two snapshots (new backends: all of theirs)."""
    spent: collections.Counter[str] = collections.Counter()
    for pid, (name, cpu) in after.items():
        if cpu is None:
            return None  # a remote server, or no permission to read its processes
        earlier = before.get(pid, (name, 0.0))[1] or 0.0
        spent[_app_group(name)] += cpu - earlier
    return dict(spent)


def _app_group(name: str) -> str:
    for group in ("tickwork-api-listen", "tickwork-api", "tickwork-worker"):
        if name.startswith(group):
            return group
    return name or "other"


# --- processes ------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def make_token(url: str, *kind: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "token", "create",
         *(kind or ("--tenant", "bench", "--admin"))],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TICKWORK_DATABASE_URL": url},
        timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"tickwork token create failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1].strip()


# Runs ``tickwork api`` in this child with a sampling profiler (a thread that reads the main
# thread's stack every 5 ms; it sees through asyncio and costs far less than cProfile, but the
# GIL hand-overs and the statement wrappers still slow the server: use the figures of an
# unprofiled run, and this only for where the time goes) and every psycopg statement counted
# by query name; both go to PROFILE_OUT as JSON when the server stops (SIGTERM).
API_PROFILER = textwrap.dedent('''
    import collections, json, os, sys, threading, time
    import psycopg
    from psycopg_pool import AsyncConnectionPool
    from tickwork.sql import QUERIES
    names = {" ".join(t.split()): n for n, t in QUERIES.items()}
    count, seconds = collections.Counter(), collections.Counter()
    def label(query):
        text = " ".join(str(query if isinstance(query, str) else query.as_string(None)).split())
        return names.get(text, text[:60] or "(empty query: the pool's check on checkout)")
    def wrap(owner, attr, name_of):
        original = getattr(owner, attr)
        async def wrapped(self, *a, **kw):
            started = time.perf_counter()
            try:
                return await original(self, *a, **kw)
            finally:
                key = name_of(a)
                count[key] += 1
                seconds[key] += time.perf_counter() - started
        setattr(owner, attr, wrapped)
    wrap(psycopg.AsyncCursor, "execute", lambda a: label(a[0]))
    wrap(AsyncConnectionPool, "getconn",
         lambda a: "(pool.getconn: waiting for a connection + check)")
    from tickwork.scheduler.api import hub
    many = hasattr(hub.EventHub, "refresh_runs")  # one read for many runs (else one per run)
    name = "refresh_runs" if many else "refresh"
    original_refresh = getattr(hub.EventHub, name)
    async def refresh(self, run_ids, *, notified=False):
        tailed = any(r in self._feeds for r in (run_ids if many else [run_ids]))
        key = (f"(hub.{name} after a NOTIFY" if notified else f"(hub.{name} by the poll")
        key += (", run tailed)" if tailed else ", nobody tails it)")
        started = time.perf_counter()
        try:
            return await original_refresh(self, run_ids, notified=notified)
        finally:
            count[key] += 1
            seconds[key] += time.perf_counter() - started
    setattr(hub.EventHub, name, refresh)
    main_id = threading.get_ident()
    leaf, inclusive, samples = collections.Counter(), collections.Counter(), [0]
    stop = threading.Event()
    def where(code):
        parts = code.co_filename.replace(os.sep, "/").split("/")
        return f"{'/'.join(parts[-2:])}:{code.co_name}"
    def sample():
        while not stop.wait(0.005):
            frame = sys._current_frames().get(main_id)
            if frame is None:
                continue
            samples[0] += 1
            leaf[where(frame.f_code)] += 1
            seen = set()
            while frame is not None:
                key = where(frame.f_code)
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += 1
                frame = frame.f_back
    threading.Thread(target=sample, daemon=True).start()
    sys.argv = ["tickwork", "api", "--host", sys.argv[1], "--port", sys.argv[2]]
    from tickwork.cli import main
    try:
        main()
    except SystemExit:
        pass
    finally:
        stop.set()
        with open(os.environ["PROFILE_OUT"], "w") as f:
            json.dump({"count": count, "seconds": seconds, "samples": samples[0],
                       "leaf": leaf, "inclusive": inclusive}, f)
''')


# Runs ``tickwork worker`` in this child with every RunJournal.emit stamped (time.time(), taken
# before the event is buffered) and every journal statement (write_batch) timed, with the runs'
# objects it carried (parsed only at the end); both go to STAMPS_OUT as JSON when it stops.
WORKER_STAMPER = textwrap.dedent('''
    import json, os, sys, time
    from tickwork.sql import journal
    stamps, writes = [], []
    original = journal.RunJournal.emit
    def emit(self, type, payload, parent=None):
        emitted = time.time()
        seq = original(self, type, payload, parent)
        stamps.append((str(self.execution_id), seq, emitted))
        return seq
    journal.RunJournal.emit = emit
    original_write = journal.write_batch
    async def write_batch(pool, runs):
        started = time.time()
        found = await original_write(pool, runs)
        writes.append((started, time.time(), runs))
        return found
    journal.write_batch = write_batch
    sys.argv = ["tickwork", "worker", "--concurrency", sys.argv[1]]
    from tickwork.cli import main
    try:
        main()
    except SystemExit:
        pass
    finally:
        landed = []  # (started, committed, [(run id, [seqs])]) per statement
        for started, ended, runs in writes:
            parsed = [json.loads(run) for run in runs]
            landed.append((started, ended, [(r["id"], [e["seq"] for e in r["events"]])
                                            for r in parsed]))
        with open(os.environ["STAMPS_OUT"], "w") as f:
            json.dump({"emitted": stamps, "writes": landed}, f)
''')


def code_python(root: Path | None) -> list[str]:
    """The Python that runs the API and the worker: this checkout's, or with --code-root
    another checkout's own virtualenv (`pip install -e .` there maps tickwork.scheduler to its
    folders, which PYTHONPATH alone cannot do); -P keeps this checkout's folder (the working
    directory) from coming ahead of that one's."""
    if root is None:
        return [sys.executable]
    python = root.resolve() / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"--code-root {root}: no {python}; make one there with "
                         "`python3 -m venv .venv && .venv/bin/pip install -e .`")
    return [str(python), "-P"]


class StampedWorker(BenchProcess):
    """``tickwork worker --concurrency C`` that records when each event was emitted."""

    name = "worker"

    def __init__(self, url: str, concurrency: int, log_path: Path, stamps_out: Path,
                 python: list[str]) -> None:
        self.stamps_out = stamps_out
        stamps_out.unlink(missing_ok=True)
        super().__init__([*python, "-c", WORKER_STAMPER, str(concurrency)],
                         {**os.environ, "TICKWORK_DATABASE_URL": url,
                          "STAMPS_OUT": str(stamps_out)}, log_path, mode="a")

    def stamps(self) -> tuple[dict[tuple[str, int], float], list[tuple[float, float, list]]]:
        """(run id, seq) -> emission time, and the journal statements (started, committed,
        [(run id, [seqs])]); empty if the worker wrote none (it died)."""
        try:
            found = json.loads(self.stamps_out.read_text())
        except (OSError, ValueError):
            return {}, []
        return ({(run, seq): at for run, seq, at in found["emitted"]},
                [tuple(write) for write in found["writes"]])


class ApiProcess(BenchProcess):
    """``python -m tickwork.cli api --host 127.0.0.1 --port P`` (optionally profiled)."""

    name = "API"

    def __init__(self, url: str, port: int, log_path: Path, profile_out: Path | None,
                 python: list[str]) -> None:
        self.port, self.profile_out = port, profile_out
        env = {**os.environ, "TICKWORK_DATABASE_URL": url}
        if profile_out is None:
            command = [*python, "-m", "tickwork.cli", "api", "--host", HOST, "--port", str(port)]
        else:
            command = [*python, "-c", API_PROFILER, HOST, str(port)]
            env["PROFILE_OUT"] = str(profile_out)
        super().__init__(command, env, log_path, stdout_to_log=True)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if httpx.get(f"http://{HOST}:{self.port}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the API did not become healthy in {timeout:.0f} s:\n"
                         + self.log_path.read_text()[-3000:])



# --- the API as a client sees it ---------------------------------------------------------------

def run_input(turns: int, turn_sleep: float) -> dict[str, Any]:
    """T turns of (sleep S, one demo.get_record call), then a closing text turn."""
    script: list[dict[str, Any]] = []
    for i in range(turns):
        if turn_sleep > 0:
            script.append({"sleep": turn_sleep})
        script.append({"tool_calls": [{"name": TOOL, "arguments": {"id": i % 1000 + 1}}]})
    script.append({"text": "done"})
    return {"script": script}


async def create_agent(api: httpx.AsyncClient) -> str:
    response = await api.post("/v1/agents", json={"name": "bench-tail", "tools": [TOOL],
                                                  "auto_approve": [TOOL],
                                                  "instructions": "Fetch records."})
    if response.status_code != 201:
        raise SystemExit(f"POST /v1/agents: {response.status_code} {response.text[:500]}")
    return response.json()["id"]


async def enqueue(api: httpx.AsyncClient, agent_id: str, count: int,
                  body: dict[str, Any]) -> list[str]:
    """Queue ``count`` runs through POST /v1/agents/{id}/runs, a few requests at a time."""
    gate = asyncio.Semaphore(8)

    async def one() -> str:
        async with gate:
            response = await api.post(f"/v1/agents/{agent_id}/runs",
                                      json={"input": body, "timeout_minutes": 10})
        if response.status_code != 202:
            raise SystemExit(f"POST runs: {response.status_code} {response.text[:500]}")
        return response.json()["id"]

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def live_tails(api: httpx.AsyncClient) -> int | None:
    """The API's own count of open tails (the tickwork_sse_subscribers gauge of /metrics)."""
    response = await api.get("/metrics", headers={  # /metrics takes the operator's token
        "Authorization": f"Bearer {api.operator_token}"})
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        if line.startswith("tickwork_sse_subscribers "):
            return int(float(line.split()[1]))
    return None


# --- subscribers --------------------------------------------------------------------------------

@dataclass
class Subscriber:
    run_id: str
    hot: bool
    status: int | None = None
    error: str | None = None
    reads: list[tuple[float, bytes]] = field(default_factory=list)  # (time.time(), raw bytes)
    chunked: bool = True  # the raw client reads the transfer encoding itself
    closed_at: float | None = None


async def raw_subscriber(sub: Subscriber, port: int, token: str, connected: "Counter") -> None:
    """GET /v1/runs/{id}/events over one plain socket: headers, then every read timestamped and
    kept as it is (parsed after the phase, so the client costs the shared CPUs little)."""
    writer = None
    try:
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
        writer.write((f"GET /v1/runs/{sub.run_id}/events HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
                      f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
                      "Connection: close\r\n\r\n").encode())
        head = await reader.readuntil(b"\r\n\r\n")
        sub.status = int(head.split(b" ", 2)[1])
        sub.chunked = b"transfer-encoding: chunked" in head.lower()
        connected.add(sub.status == 200)
        reads = sub.reads
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            reads.append((time.time(), data))
        sub.closed_at = time.time()
    except Exception as exc:  # reported per subscriber, never raised: the others go on
        sub.error = f"{type(exc).__name__}: {exc}"[:200]
        if sub.status is None:
            connected.add(False)
    finally:
        if writer is not None:
            writer.close()


async def httpx_subscriber(sub: Subscriber, client: httpx.AsyncClient, token: str,
                           connected: "Counter") -> None:
    sub.chunked = False  # httpx removes the transfer encoding
    try:
        async with client.stream("GET", f"/v1/runs/{sub.run_id}/events",
                                 headers={"Authorization": f"Bearer {token}",
                                          "Accept": "text/event-stream"}) as response:
            sub.status = response.status_code
            connected.add(sub.status == 200)
            async for data in response.aiter_raw():
                sub.reads.append((time.time(), data))
        sub.closed_at = time.time()
    except Exception as exc:
        sub.error = f"{type(exc).__name__}: {exc}"[:200]
        if sub.status is None:
            connected.add(False)


class Counter:
    def __init__(self) -> None:
        self.ok = self.failed = 0
        self.changed = asyncio.Event()

    def add(self, ok: bool) -> None:
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        self.changed.set()


def spread(run_ids: list[str], subscribers: int, hot_share: float) -> list[Subscriber]:
    """``hot_share`` of the subscribers on the first run, the rest round-robin over the others."""
    hot = round(subscribers * hot_share) if len(run_ids) > 1 else subscribers
    others = run_ids[1:] or run_ids
    return ([Subscriber(run_ids[0], True) for _ in range(hot)]
            + [Subscriber(others[i % len(others)], False) for i in range(subscribers - hot)])


# --- parsing what the clients received (after the phase) ----------------------------------------

def _timed(pieces: list[tuple[float, bytes]]) -> tuple[bytes, list[int], list[float]]:
    buf = b"".join(data for _, data in pieces)
    ends, times, total = [], [], 0
    for t, data in pieces:
        total += len(data)
        ends.append(total)
        times.append(t)
    return buf, ends, times


def _time_at(ends: list[int], times: list[float], index: int) -> float:
    """When the byte at ``index`` arrived: the time of the read that delivered it."""
    return times[bisect.bisect_right(ends, index)]


def dechunk(pieces: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """HTTP/1.1 chunked body -> (time its last byte arrived, chunk data) per chunk."""
    buf, ends, times = _timed(pieces)
    out, pos = [], 0
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            break
        size = int(buf[pos:eol].split(b";")[0], 16)
        start, end = eol + 2, eol + 2 + size
        if size == 0 or end > len(buf):
            break
        out.append((_time_at(ends, times, end - 1), buf[start:end]))
        pos = end + 2
    return out


def sse_events(pieces: list[tuple[float, bytes]]) -> list[tuple[float, dict[str, Any]]]:
    """(arrival time, event JSON) per SSE event frame; comments (keepalives) are skipped. The
    frame's id and event fields are checked against its data."""
    buf, ends, times = _timed(pieces)
    out, pos = [], 0
    while True:
        end = buf.find(b"\n\n", pos)
        if end < 0:
            break
        block, pos = buf[pos:end], end + 2
        fields: dict[str, str] = {}
        for line in block.decode().split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        if "data" not in fields:
            continue
        event = json.loads(fields["data"])
        if fields.get("id") != str(event["seq"]) or fields.get("event") != event["type"]:
            event["_frame_mismatch"] = True
        out.append((_time_at(ends, times, end + 1), event))
    return out


def parse_ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- one phase ------------------------------------------------------------------------------------

@dataclass
class PhaseResult:
    label: str
    subscribers: int
    events: int
    span_s: float
    events_per_s: float
    run_ms_p50: float
    load: str
    cpu: dict[str, float | None]
    busy_pct: float | None
    commits: int
    latencies_ms: list[float] = field(default_factory=list)  # emission -> client
    commit_latencies_ms: list[float] = field(default_factory=list)  # ts (INSERT) -> client
    unstamped: int = 0  # received events with no emission stamp (run_start: from its ts)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (event ts, latency ms)
    first_ts: float = 0.0
    latency_by_type: dict[str, list[float]] = field(default_factory=dict)
    connected: int = 0
    failed: int = 0
    mismatched: int = 0
    missing_events: int = 0
    errors: list[str] = field(default_factory=list)
    frames: int = 0
    batches: int = 0  # reads that delivered events, summed over subscribers
    mismatch_kinds: collections.Counter = field(default_factory=collections.Counter)
    mismatch_example: str = ""
    writes: int = 0  # the worker's journal statements
    write_gaps_ms: list[float] = field(default_factory=list)  # between their commits
    emit_to_commit_ms: list[float] = field(default_factory=list)  # in the worker, per event
    commit_to_client_ms: list[float] = field(default_factory=list)  # hub + send, per frame


async def wait_runs_done(conn: psycopg.AsyncConnection, run_ids: list[str],
                         worker: WorkerProcess | StampedWorker, on_first_start) -> None:
    last_progress, seen_done, started = time.monotonic(), -1, False
    while True:
        row = await (await conn.execute(
            "SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')), "
            "       count(*) FILTER (WHERE status <> 'queued') "
            "FROM executions WHERE id = ANY(%s::uuid[])", (run_ids,))).fetchone()
        done, begun = row
        if begun and not started:
            started = True
            on_first_start()
        if done == len(run_ids):
            return
        if done != seen_done:
            seen_done, last_progress = done, time.monotonic()
        elif time.monotonic() - last_progress > STALL_SECONDS:
            raise SystemExit(f"no run finished for {STALL_SECONDS:.0f} s ({done} of "
                             f"{len(run_ids)} done)")
        worker.check_alive()
        await asyncio.sleep(0.05)


async def api_settled(url: str, timeout: float = 10.0) -> float:
    """Wait until no API backend is running a statement (the new tails' replay and status
    reads are done) twice in a row, so they do not land in the measured phase."""
    started, quiet = time.monotonic(), 0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while quiet < 2 and time.monotonic() - started < timeout:
            row = await (await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name LIKE 'tickwork-api%%' AND state = 'active'")).fetchone()
            quiet = quiet + 1 if row[0] == 0 else 0
            await asyncio.sleep(0.05)
    return time.monotonic() - started


async def run_phase(label: str, url: str, api: httpx.AsyncClient, api_proc: ApiProcess,
                    token: str, agent_id: str, args: argparse.Namespace, body: dict[str, Any],
                    log_path: Path) -> PhaseResult:
    n_subs = args.subscribers if label == "B" else 0
    run_ids = await enqueue(api, agent_id, args.runs, body)
    subs = spread(run_ids, n_subs, args.hot_share) if n_subs else []
    connected = Counter()
    tasks: list[asyncio.Task] = []
    sub_client = None
    if subs:
        if args.client == "httpx":
            sub_client = httpx.AsyncClient(
                base_url=f"http://{HOST}:{api_proc.port}", timeout=httpx.Timeout(None),
                limits=httpx.Limits(max_connections=n_subs + 10,
                                    max_keepalive_connections=n_subs + 10))
            tasks = [asyncio.create_task(httpx_subscriber(s, sub_client, token, connected))
                     for s in subs]
        else:
            tasks = [asyncio.create_task(raw_subscriber(s, api_proc.port, token, connected))
                     for s in subs]
        t0 = time.monotonic()
        while connected.ok + connected.failed < n_subs and time.monotonic() - t0 < 60:
            connected.changed.clear()
            with _suppress_timeout():
                await asyncio.wait_for(connected.changed.wait(), 1.0)
        connect_s = time.monotonic() - t0
        live = None
        while time.monotonic() - t0 < 60:  # the API has them all as tails (hub subscribed)
            live = await live_tails(api)
            if live is None or live >= connected.ok:
                break
            await asyncio.sleep(0.1)
        settle_s = await api_settled(url)
        say(f"  phase {label}: {connected.ok} of {n_subs} subscribers connected in "
            f"{connect_s:.1f} s ({connected.failed} failed); the API counts {live} live tails "
            f"and its connections went idle {settle_s:.1f} s later")

    commits_before = database_commits(url)
    pg_before = backends(url)
    api_cpu_before = process_cpu_s(api_proc.pid)
    bench_cpu_before = time.process_time()
    marks: dict[str, Any] = {}
    worker = StampedWorker(url, args.concurrency, log_path, log_path.with_name("stamps.json"),
                           code_python(args.code_root))

    def first_start() -> None:
        marks["worker_cpu"] = process_cpu_s(worker.pid)
        marks["machine"] = machine_cpu()

    # Nothing may block this event loop while subscribers read (their receive times would be
    # late): the blocking calls below run in threads, or after the streams have closed.
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        try:
            await wait_runs_done(conn, run_ids, worker, first_start)
            marks["worker_cpu_end"] = process_cpu_s(worker.pid)
            machine_end = machine_cpu()
            if tasks:  # every stream closes after run_complete
                done, pending = await asyncio.wait(tasks, timeout=30)
                for task in pending:
                    task.cancel()
                if pending:
                    say(f"  phase {label}: {len(pending)} subscribers still open 30 s after "
                        "the last run finished (cancelled)")
            api_cpu_after, bench_cpu_after = process_cpu_s(api_proc.pid), time.process_time()
            pg_after = await asyncio.to_thread(backends, url)  # the worker's are still there
        finally:
            await asyncio.to_thread(worker.stop)
        commits = database_commits(url) - commits_before
        rows = await (await conn.execute(
            "SELECT execution_id::text, seq, type, extract(epoch FROM ts)::float8 "
            "FROM run_events WHERE execution_id = ANY(%s::uuid[]) ORDER BY execution_id, seq",
            (run_ids,))).fetchall()
        statuses = await (await conn.execute(
            "SELECT status, count(*) FROM executions WHERE id = ANY(%s::uuid[]) GROUP BY 1",
            (run_ids,))).fetchall()
    if sub_client is not None:
        await sub_client.aclose()
    if dict(statuses).get("completed", 0) != len(run_ids):
        raise SystemExit(f"phase {label}: runs did not all complete: {dict(statuses)}")

    journal: dict[str, list[int]] = collections.defaultdict(list)
    first_ts: dict[str, float] = {}
    last_ts: dict[str, float] = {}
    for run_id, seq, _type, ts in rows:
        journal[run_id].append(seq)
        first_ts.setdefault(run_id, ts)
        last_ts[run_id] = ts
    all_ts = [r[3] for r in rows]
    span = max(all_ts) - min(all_ts)
    run_ms = sorted(1000 * (last_ts[r] - first_ts[r]) for r in journal)

    worker_cpu = None
    if marks.get("worker_cpu") is not None and marks.get("worker_cpu_end") is not None:
        worker_cpu = marks["worker_cpu_end"] - marks["worker_cpu"]
    pg_cpu = backend_cpu_by_app(pg_before, pg_after)
    cpu = {
        "worker_s": worker_cpu,
        "api_s": (api_cpu_after - api_cpu_before) if api_cpu_before is not None else None,
        "bench_s": bench_cpu_after - bench_cpu_before,
        "pg_api_s": (pg_cpu.get("tickwork-api", 0.0) + pg_cpu.get("tickwork-api-listen", 0.0))
        if pg_cpu is not None else None,
        "pg_worker_s": pg_cpu.get("tickwork-worker", 0.0) if pg_cpu is not None else None,
    }
    result = PhaseResult(label=label, subscribers=n_subs, events=len(rows), span_s=span,
                         events_per_s=len(rows) / span, run_ms_p50=statistics.median(run_ms),
                         load=load_text(), cpu=cpu,
                         busy_pct=busy_pct(marks.get("machine"), machine_end),
                         commits=commits, connected=connected.ok, failed=connected.failed)
    result.first_ts = min(all_ts)
    emitted, writes = worker.stamps()
    committed = attribute_writes(result, emitted, writes)
    if subs:
        check_subscribers(result, subs, journal, rows, emitted, committed)
    return result


def attribute_writes(result: PhaseResult, emitted: dict[tuple[str, int], float],
                     writes: list[tuple[float, float, list]]) -> dict[tuple[str, int], float]:
    """The worker's side of the latency: the gaps between its journal commits and each
    event's wait from emission to the commit that carried it; (run id, seq) -> commit time."""
    committed: dict[tuple[str, int], float] = {}
    ends = sorted(ended for _, ended, _ in writes)
    result.writes = len(ends)
    result.write_gaps_ms = [1000 * (b - a) for a, b in zip(ends, ends[1:])]
    for _, ended, runs in writes:
        for run_id, seqs in runs:
            for seq in seqs:
                committed.setdefault((run_id, seq), ended)
    result.emit_to_commit_ms = [1000 * (committed[key] - at) for key, at in emitted.items()
                                if key in committed]
    return committed


def mismatch_kinds(seqs: list[int], expected: list[int], events: list[tuple[float, dict]],
                   ts_of: dict[tuple[str, int], float], run_id: str) -> list[str]:
    """What is wrong with one subscriber's stream ([] when it is exactly the run's journal)."""
    kinds = []
    if len(set(seqs)) != len(seqs):
        kinds.append("duplicates")
    if seqs != sorted(seqs):
        kinds.append("out_of_order")
    if set(expected) - set(seqs):
        kinds.append("missing")
    if set(seqs) - set(expected):
        kinds.append("unknown_seq")
    if any("_frame_mismatch" in e for _, e in events):
        kinds.append("frame_id_or_event_differs_from_data")
    if any(abs(parse_ts(e["ts"]) - ts_of.get((run_id, e["seq"]), parse_ts(e["ts"]))) > 1e-3
           for _, e in events):
        kinds.append("ts_differs_from_stored")
    return kinds


def _seq_text(seqs: list[int]) -> str:
    """1-95 style runs of consecutive seqs, so a duplicate or a gap is visible in one line."""
    parts, start = [], None
    for i, seq in enumerate(seqs):
        if start is None:
            start = seq
        if i + 1 == len(seqs) or seqs[i + 1] != seq + 1:
            parts.append(f"{start}" if start == seq else f"{start}-{seq}")
            start = None
    return ",".join(parts) or "nothing"


class _suppress_timeout:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is asyncio.TimeoutError


def check_subscribers(result: PhaseResult, subs: list[Subscriber],
                      journal: dict[str, list[int]], rows: list[tuple],
                      emitted: dict[tuple[str, int], float],
                      committed: dict[tuple[str, int], float]) -> None:
    """Latency of every received event from its emission (from its ts where it was not emitted
    by the run: run_start), and whether each subscriber got its run's whole journal in order,
    each event once."""
    ts_of = {(r[0], r[1]): r[3] for r in rows}
    by_type: dict[str, list[float]] = collections.defaultdict(list)
    errors: collections.Counter[str] = collections.Counter()
    for sub in subs:
        if sub.error:
            errors[sub.error.split(":")[0]] += 1
        if sub.status != 200:
            result.mismatched += 1
            continue
        pieces = dechunk(sub.reads) if sub.chunked else sub.reads
        events = sse_events(pieces)
        result.frames += len(events)
        result.batches += len({arrived for arrived, _ in events})
        seqs = [e["seq"] for _, e in events]
        expected = journal.get(sub.run_id, [])
        kinds = mismatch_kinds(seqs, expected, events, ts_of, sub.run_id)
        if kinds:
            result.mismatched += 1
            result.missing_events += len(set(expected) - set(seqs))
            for kind in kinds:
                result.mismatch_kinds[kind] += 1
            if not result.mismatch_example:
                result.mismatch_example = (f"run {sub.run_id[:8]}: {', '.join(kinds)}; got "
                                           f"{_seq_text(seqs)}, stored {_seq_text(expected)}")
        for arrived, event in events:
            ts = ts_of.get((sub.run_id, event["seq"]))
            if ts is None:
                continue
            result.commit_latencies_ms.append(1000 * (arrived - ts))
            if (sub.run_id, event["seq"]) in committed:
                result.commit_to_client_ms.append(
                    1000 * (arrived - committed[sub.run_id, event["seq"]]))
            at = emitted.get((sub.run_id, event["seq"]))
            if at is None:
                result.unstamped += 1
            ms = 1000 * (arrived - (ts if at is None else at))
            result.latencies_ms.append(ms)
            result.timeline.append((ts, ms))
            by_type[event["type"]].append(ms)
    result.latency_by_type = dict(by_type)
    result.errors = [f"{n} x {e}" for e, n in errors.items()]


# --- figures --------------------------------------------------------------------------------------

def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def r1(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def report_phase(res: PhaseResult) -> None:
    cpu = res.cpu
    share = lambda v: "?" if v is None else f"{100 * v / res.span_s:.0f}%"  # noqa: E731
    say(f"  phase {res.label} ({res.subscribers} subscribers): {res.events:,} events in "
        f"{res.span_s:.2f} s = {res.events_per_s:,.0f} events/s; run p50 {res.run_ms_p50:.0f} ms;"
        f" load {res.load}; machine {res.busy_pct}% busy")
    say(f"    CPU over the phase (% of one core): worker {share(cpu['worker_s'])}, its backends "
        f"{share(cpu['pg_worker_s'])}; API {share(cpu['api_s'])}, its backends "
        f"{share(cpu['pg_api_s'])}; this bench {share(cpu['bench_s'])}; "
        f"{res.commits:,} database commits ({res.commits / res.span_s:,.0f}/s)")
    gaps, waits = res.write_gaps_ms, res.emit_to_commit_ms
    api_ms = None if cpu["api_s"] is None or not res.writes else 1000 * cpu["api_s"] / res.writes
    if gaps and waits:
        say(f"    worker: {res.writes:,} journal statements, gaps between their commits p50 "
            f"{percentile(gaps, 50):.1f} / p99 {percentile(gaps, 99):.1f} / max {max(gaps):.1f}"
            f" ms; emission -> commit p50 {percentile(waits, 50):.1f} / p99 "
            f"{percentile(waits, 99):.1f} ms; API CPU per statement "
            + ("?" if api_ms is None else f"{api_ms:.2f} ms"))
    if res.commit_to_client_ms:
        sent = res.commit_to_client_ms
        say(f"    commit (the worker's statement returned) -> client: p50 "
            f"{percentile(sent, 50):.1f} / p95 {percentile(sent, 95):.1f} / p99 "
            f"{percentile(sent, 99):.1f} ms")
    if res.subscribers:
        lat = res.latencies_ms
        say(f"    {len(lat):,} events received by {res.connected} subscribers: emission -> "
            f"client p50 "
            f"{percentile(lat, 50):.1f} ms, p95 {percentile(lat, 95):.1f} ms, p99 "
            f"{percentile(lat, 99):.1f} ms, max {max(lat):.1f} ms; {res.mismatched} "
            f"subscribers mismatched ({res.missing_events} events missing)"
            + (f"; errors: {', '.join(res.errors)}" if res.errors else ""))
        buckets: dict[int, list[float]] = collections.defaultdict(list)
        for ts, ms in res.timeline:
            buckets[int(2 * (ts - res.first_ts))].append(ms)
        say("    p50/p99 ms by when the event was written (half seconds from the first): "
            + ", ".join(f"{k / 2:.1f}s {percentile(v, 50):.0f}/{percentile(v, 99):.0f}"
                        for k, v in sorted(buckets.items())))
        if res.mismatched:
            say(f"    mismatches: {dict(res.mismatch_kinds)}; e.g. {res.mismatch_example}")


def print_api_profile(profile_out: Path, subscriber_wakeups: int) -> dict[str, Any]:
    try:
        prof = json.loads(profile_out.read_text())
    except (OSError, ValueError):
        say("profile: the API wrote no profile")
        return {}
    say("profile of the API process (all phases and set-up; phase A adds next to nothing):")
    say(f"  statements by query name, pool check-outs and hub refreshes (count, wall ms summed "
        f"over concurrent calls); the B phases' clients received {subscriber_wakeups:,} batches:")
    for name, n in sorted(prof["count"].items(), key=lambda kv: -kv[1])[:14]:
        say(f"    {n:8,}  {1000 * prof['seconds'][name]:10.0f} ms  {name}")
    total = max(prof["samples"], 1)
    idle = sum(n for key, n in prof["leaf"].items() if key.endswith("selectors.py:select"))
    say(f"  stack samples of the event loop thread every 5 ms: {total:,}, idle in epoll "
        f"{100 * idle / total:.0f}%; busiest leaf functions (% of samples):")
    for key, n in sorted(prof["leaf"].items(), key=lambda kv: -kv[1])[:12]:
        say(f"    {100 * n / total:5.1f}%  {key}")
    say("  inclusive, for the tail's and the server's own frames (% of samples):")
    wanted = ("scheduler/", "sql/", "starlette/", "uvicorn/", "psycopg_pool/", "asyncio/tasks")
    shown = 0
    for key, n in sorted(prof["inclusive"].items(), key=lambda kv: -kv[1]):
        if any(part in key for part in wanted) and shown < 18:
            say(f"    {100 * n / total:5.1f}%  {key}")
            shown += 1
    return {"api_statements": prof["count"], "api_idle_pct": round(100 * idle / total, 1)}


# --- main -----------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=500, help="SSE subscribers in phase B")
    parser.add_argument("--runs", type=int, default=16, help="runs per phase")
    parser.add_argument("--concurrency", type=int, default=16, help="the worker's --concurrency")
    parser.add_argument("--turns", type=int, default=30,
                        help="tool-call turns per run (3 events and one append each)")
    parser.add_argument("--turn-sleep", type=float, default=0.05,
                        help="scripted model sleep before each turn, seconds (0: flat out)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B pairs (rates are medians)")
    parser.add_argument("--hot-share", type=float, default=0.5,
                        help="share of the subscribers on the first run of phase B")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw",
                        help="raw: minimal asyncio HTTP reader; httpx: httpx streaming")
    parser.add_argument("--profile-api", action="store_true",
                        help="sample the API's stack and count its statements")
    parser.add_argument("--code-root", type=Path, default=None,
                        help="run the API and the worker from another checkout (e.g. a git "
                             "worktree of an older commit, with its own .venv), for a "
                             "before/after in one hour")
    args = parser.parse_args()
    if min(args.subscribers, args.runs, args.concurrency, args.turns, args.rounds) < 1:
        parser.error("--subscribers, --runs, --concurrency, --turns and --rounds must be >= 1")
    if not 0 <= args.hot_share <= 1:
        parser.error("--hot-share is a fraction from 0 to 1")
    return args


def raise_fd_limit(needed: int) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return f"open files limit {soft} (hard {hard})"


async def bench(url: str, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    token, operator_token = make_token(url), make_token(url, "--operator")
    port = free_port()
    profile_out = scratch / "api-profile.json" if args.profile_api else None
    api_proc = ApiProcess(url, port, scratch / "api.log", profile_out, code_python(args.code_root))
    phases: list[PhaseResult] = []
    batches_b = 0
    try:
        api_proc.wait_ready()
        async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=60,
                                     headers={"Authorization": f"Bearer {token}"}) as api:
            api.operator_token = operator_token
            agent_id = await create_agent(api)
            body = run_input(args.turns, args.turn_sleep)
            say(f"API on port {port} (pid {api_proc.pid}{', profiled' if profile_out else ''}"
                f"); one agent with {TOOL}; each run: {args.turns} turns of "
                f"sleep {args.turn_sleep} s + one {TOOL} call, then a text turn; "
                f"{args.runs} runs per phase, worker --concurrency {args.concurrency}; "
                f"{args.client} client")
            for round_no in range(args.rounds):
                for label in ("A", "B"):
                    res = await run_phase(label, url, api, api_proc, token, agent_id, args, body,
                                          scratch / "worker.log")
                    report_phase(res)
                    phases.append(res)
                    batches_b += res.batches
                    api_proc.check_alive()
    finally:
        api_proc.stop()
    figures: dict[str, Any] = {"phases": phases}
    if profile_out is not None:
        figures.update(print_api_profile(profile_out, batches_b))
    return figures


def main() -> None:
    args = parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    fd_note = raise_fd_limit(args.subscribers * 2 + 256)
    scratch = Path(tempfile.mkdtemp(prefix="tickwork-bench-tail-work-"))
    try:
        with scratch_database(SCRATCH_DB) as url:
            describe_server(url, ("shared_buffers", "synchronous_commit", "max_connections"))
            migrate(url)
            tools = publish_catalog(url)
            say(f"migrated; {tools} tools published; {fd_note}")
            figures = asyncio.run(bench(url, args, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    phases: list[PhaseResult] = figures["phases"]
    a = [p for p in phases if p.label == "A"]
    b = [p for p in phases if p.label == "B"]
    rate_a = statistics.median(p.events_per_s for p in a)
    rate_b = statistics.median(p.events_per_s for p in b)
    run_a = statistics.median(p.run_ms_p50 for p in a)
    run_b = statistics.median(p.run_ms_p50 for p in b)
    slowdown = 1 - rate_b / rate_a
    lat = [ms for p in b for ms in p.latencies_ms]
    commit_lat = [ms for p in b for ms in p.commit_latencies_ms]
    by_type: dict[str, list[float]] = collections.defaultdict(list)
    for p in b:
        for kind, values in p.latency_by_type.items():
            by_type[kind].extend(values)
    p50, p95, p99 = percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
    mismatched = sum(p.mismatched for p in b)
    failed = sum(p.failed for p in b)
    connected = min(p.connected for p in b)
    say("latency by event type (ms; p50 / p99, count):")
    for kind, values in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
        say(f"    {kind:14} {percentile(values, 50):8.1f} / {percentile(values, 99):8.1f}  "
            f"{len(values):,}")
    def cpu_pct(group: list[PhaseResult], key: str) -> float | None:
        values = [p.cpu[key] / p.span_s for p in group if p.cpu.get(key) is not None]
        return round(100 * statistics.median(values), 1) if values else None

    say(f"worker: {rate_a:,.0f} events/s without subscribers, {rate_b:,.0f} events/s with "
        f"{args.subscribers} (medians of {args.rounds}); worker_slowdown {100 * slowdown:+.1f}% "
        f"(goal <= {100 * GOAL_SLOWDOWN:.0f}%); run p50 {run_a:.0f} -> {run_b:.0f} ms")
    over_goal = sum(ms > GOAL_EMIT_MS for ms in lat)
    say(f"tail: emission -> client p50 {p50:.1f} ms, p95 {p95:.1f} ms, p99 {p99:.1f} ms, max "
        f"{max(lat):.1f} ms over {len(lat):,} received events; {over_goal} later than "
        f"{GOAL_EMIT_MS:.0f} ms after emission; commit -> client p99 "
        f"{percentile(commit_lat, 99):.1f} ms (goal <= {GOAL_P99_MS:.0f} ms; ts is "
        "clock_timestamp() at INSERT, before COMMIT); "
        f"{mismatched} mismatched subscribers, {failed} failed to connect; load {load_text()}")
    result = {
        "measured": "emission -> client (worker stamps at RunJournal.emit; run_start from ts)",
        "p50_ms": r1(p50, 2),
        "p95_ms": r1(p95, 2),
        "p99_ms": r1(p99, 2),
        "max_ms": r1(max(lat) if lat else None, 2),
        "over_250ms_after_emission": over_goal,
        "goal_emit_ms": GOAL_EMIT_MS,
        "unstamped_events": sum(p.unstamped for p in b),
        "commit_p50_ms": r1(percentile(commit_lat, 50), 2),
        "commit_p99_ms": r1(percentile(commit_lat, 99), 2),
        "p99_ms_without_run_start": r1(percentile(
            [ms for kind, v in by_type.items() if kind != "run_start" for ms in v], 99), 2),
        "run_start_p50_ms": r1(percentile(by_type.get("run_start", []), 50), 2),
        "goal_commit_p99_ms": GOAL_P99_MS,
        "worker_slowdown": round(slowdown, 4),
        "goal_worker_slowdown": GOAL_SLOWDOWN,
        "worker_events_per_s_without": round(rate_a, 1),
        "worker_events_per_s_with": round(rate_b, 1),
        "events_per_s_ratio": round(rate_b / rate_a, 4),
        "run_ms_p50_without": round(run_a, 1),
        "run_ms_p50_with": round(run_b, 1),
        "run_time_ratio": round(run_b / run_a, 4),
        "events_per_s_each": {p.label + str(i // 2 + 1): round(p.events_per_s, 1)
                              for i, p in enumerate(phases)},
        "received_events": len(lat),
        "subscribers": args.subscribers,
        "subscribers_connected": connected,
        "subscribers_failed": failed,
        "mismatched_subscribers": mismatched,
        "missing_events": sum(p.missing_events for p in b),
        "emit_to_commit_p50_ms": r1(percentile(
            [ms for p in b for ms in p.emit_to_commit_ms], 50), 2),
        "emit_to_commit_p99_ms": r1(percentile(
            [ms for p in b for ms in p.emit_to_commit_ms], 99), 2),
        "commit_to_client_p50_ms": r1(percentile(
            [ms for p in b for ms in p.commit_to_client_ms], 50), 2),
        "commit_to_client_p99_ms": r1(percentile(
            [ms for p in b for ms in p.commit_to_client_ms], 99), 2),
        "write_gap_p99_ms": r1(percentile([ms for p in b for ms in p.write_gaps_ms], 99), 2),
        "api_cpu_ms_per_write": r1(statistics.median(
            1000 * p.cpu["api_s"] / p.writes for p in b
            if p.cpu.get("api_s") is not None and p.writes) if b else None, 3),
        "api_cpu_pct_with": cpu_pct(b, "api_s"),
        "api_cpu_pct_without": cpu_pct(a, "api_s"),
        "api_pg_cpu_pct_with": cpu_pct(b, "pg_api_s"),
        "worker_cpu_pct_without": cpu_pct(a, "worker_s"),
        "worker_cpu_pct_with": cpu_pct(b, "worker_s"),
        "bench_cpu_pct_with": cpu_pct(b, "bench_s"),
        "db_commits_per_s_without": round(statistics.median(p.commits / p.span_s for p in a), 1),
        "db_commits_per_s_with": round(statistics.median(p.commits / p.span_s for p in b), 1),
        "machine_busy_pct_without": r1(statistics.median(p.busy_pct or 0 for p in a)),
        "machine_busy_pct_with": r1(statistics.median(p.busy_pct or 0 for p in b)),
        "loadavg_end": [round(v, 2) for v in os.getloadavg()],
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "events_per_run": round(statistics.median(p.events for p in phases) / args.runs, 1),
        "turns": args.turns,
        "turn_sleep_s": args.turn_sleep,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "client": args.client,
        "profiled_api": args.profile_api,
        "code_root": str(args.code_root or ROOT),
        "ts_note": "commit_*: ts = clock_timestamp() at INSERT (before COMMIT), slightly overstated",
        "server": "url" if os.environ.get("TICKWORK_DATABASE_URL") else "embedded",
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
