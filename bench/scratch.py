"""What every bench shares: printing as it goes, a scratch database on the server named by
TICKWORK_DATABASE_URL (else on an embedded Postgres started for the bench, dropped after, with a
slow disk when TICKWORK_BENCH_FSYNC_DELAY_MS says so), and CPU accounting from /proc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo

from tickwork.embedded import start_embedded


FSYNC_DELAY_VARIABLE = "TICKWORK_BENCH_FSYNC_DELAY_MS"  # a slow disk for the embedded server


def say(message: str) -> None:
    print(message, flush=True)


@contextmanager
def scratch_database(name: str) -> Iterator[str]:
    """Yield the conninfo of a fresh database ``name``; drop it (and any embedded server) at
    the end."""
    server_url = os.environ.get("TICKWORK_DATABASE_URL", "")
    if server_url:
        say(f"server: TICKWORK_DATABASE_URL ({redacted(server_url)})")
        with _fresh_database(server_url, name) as url:
            yield url
        return
    root = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    os.chmod(root, 0o755)  # as root the server runs as another user, who must enter the folder
    with slow_disk(root):
        server = start_embedded(root)
    say(f"server: embedded Postgres in {root} on port {server.port}")
    try:
        with _fresh_database(server.url, name) as url:
            yield url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def slow_disk(root: Path) -> Iterator[None]:
    """With TICKWORK_BENCH_FSYNC_DELAY_MS set, the embedded server started inside this block
    waits that long before every fsync/fdatasync (bench/slow_disk.c, built here with the
    system C compiler and loaded with LD_PRELOAD): a slow-disk hour on demand."""
    delay_ms = float(os.environ.get(FSYNC_DELAY_VARIABLE) or 0)
    if delay_ms <= 0:
        yield
        return
    library = root / "slow_disk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library),
                    str(Path(__file__).with_name("slow_disk.c")), "-ldl"], check=True)
    os.chmod(library, 0o755)
    saved = {key: os.environ.get(key) for key in ("LD_PRELOAD", "TICKWORK_BENCH_FSYNC_DELAY_US")}
    os.environ["LD_PRELOAD"] = str(library)
    os.environ["TICKWORK_BENCH_FSYNC_DELAY_US"] = str(int(delay_ms * 1000))
    say(f"slow disk: every fsync/fdatasync of the embedded server waits {delay_ms:g} ms first")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _fresh_database(server_url: str, name: str) -> Iterator[str]:
    drop = pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
    create = pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name))
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(drop)  # a previous run that died leaves it behind
        admin.execute(create)
    try:
        yield make_conninfo(server_url, dbname=name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(drop)


def describe_server(url: str, settings: tuple[str, ...]) -> None:
    """Print the server's version, the named settings, and the machine's CPUs and load."""
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        shown = {name: conn.execute(pgsql.SQL("SHOW {}").format(pgsql.Identifier(name)))
                 .fetchone()[0] for name in settings}
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    say(f"postgres {version}; " + ", ".join(f"{k}={v}" for k, v in shown.items())
        + f"; {os.cpu_count()} CPUs, load average {load}")


def redacted(url: str) -> str:
    return url.split("@")[-1] if "@" in url else url


# --- CPU accounting (only when the server runs on this machine) --------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU jiffies of the whole machine so far."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return float(sum(values) - idle), float(sum(values))


def busy_pct(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100 * (after[0] - before[0]) / (after[1] - before[1]), 1)


# --- tickwork processes a bench starts ---------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


class BenchProcess:
    """A process the bench starts; its output goes to a log whose tail is shown if it dies."""

    name = "process"

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path,
                 *, mode: str = "w", stdout_to_log: bool = False) -> None:
        self.log_path = log_path
        self._log = open(log_path, mode)
        self.started = time.perf_counter()
        # A worker's stdout (a JSON log line per run) is discarded, but the process still
        # renders it: that is part of its cost in production too.
        self.process = subprocess.Popen(
            command, cwd=ROOT, stderr=subprocess.STDOUT if stdout_to_log else self._log,
            stdout=self._log if stdout_to_log else subprocess.DEVNULL, text=True, env=env)

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise SystemExit(f"the {self.name} exited with {self.process.returncode}:\n"
                             + self.log_path.read_text()[-3000:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._log.close()


class WorkerProcess(BenchProcess):
    """``python -m tickwork.cli worker --concurrency C`` with default settings otherwise."""

    name = "worker"

    def __init__(self, url: str, concurrency: int, log_path: Path, *, mode: str = "w") -> None:
        super().__init__([sys.executable, "-m", "tickwork.cli", "worker", "--concurrency",
                          str(concurrency)], {**os.environ, "TICKWORK_DATABASE_URL": url},
                         log_path, mode=mode)
