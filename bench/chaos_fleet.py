"""The R12 chaos soak's processes and clients: the tickwork fleet it kills and restarts, the
`tickwork` command for setup, and API calls retried the way a client should."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from scratch import ROOT, BenchProcess, say  # bench/scratch.py

CLI = [sys.executable, "-m", "tickwork.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Fleet:
    """The soak's tickwork processes by name; each can be killed and started again."""

    def __init__(self, url: str, logs: Path, api_port: int, concurrency: int) -> None:
        self.env = {**os.environ, "TICKWORK_DATABASE_URL": url}
        self.logs = logs
        self.commands = {
            "api": CLI + ["api", "--port", str(api_port)],
            "scheduler-1": CLI + ["scheduler"], "scheduler-2": CLI + ["scheduler"],
            "worker-1": CLI + ["worker", "--concurrency", str(concurrency)],
            "worker-2": CLI + ["worker", "--concurrency", str(concurrency)],
        }
        self.procs: dict[str, BenchProcess] = {}
        self.unexpected_exits: list[str] = []

    def start(self, name: str) -> None:
        self.procs[name] = BenchProcess(self.commands[name], self.env,
                                        self.logs / f"{name}.log", mode="a", stdout_to_log=True)

    def kill(self, name: str) -> int:
        proc = self.procs[name].process
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.procs[name]._log.close()
        self.start(name)
        return proc.pid

    def restart_the_dead(self, elapsed: float) -> None:
        """A process that exited without being killed is a finding: count it, start it again."""
        for name, proc in list(self.procs.items()):
            if proc.process.poll() is not None:
                code = proc.process.returncode
                self.unexpected_exits.append(f"{name} exited {code} at t+{elapsed:.0f}s")
                say(f"  t+{elapsed:5.1f}s  {name} EXITED on its own ({code}); see "
                    f"{proc.log_path}; started again")
                proc._log.close()
                # Its last words, here: the folder with the logs goes when the soak passes.
                for line in proc.log_path.read_text(errors="replace").splitlines()[-6:]:
                    say(f"      | {line[:300]}")
                self.start(name)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.stop()


def tickwork(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(CLI + list(args), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"tickwork {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def wait_healthy(base: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"the API at {base} did not become healthy within {timeout:g}s")


API_RETRIES: list[str] = []  # 503s and cut connections a client met (and retried)


def call(client: httpx.Client, method: str, path: str, **kwargs) -> httpx.Response:
    """One API call, retried as a client should: the API answers 503 (try again) for a
    database connection it lost, e.g. to the Postgres restart."""
    for _ in range(20):
        try:
            response = client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            API_RETRIES.append(f"{method} {path}: {type(exc).__name__}")
        else:
            if response.status_code != 503:
                response.raise_for_status()
                return response
            API_RETRIES.append(f"{method} {path}: 503")
        time.sleep(0.5)
    raise SystemExit(f"{method} {path} kept failing; last: {API_RETRIES[-1]}")


def run_in_scratch(prefix: str, args: Any, soak: Callable[[Any, Path], Any],
                   report: Callable[[Any, Any], int]) -> None:
    """Run a soak in a new folder under /tmp and exit with its report's code; the folder (data
    and logs) is kept when asked, when the soak broke off, or when an invariant failed."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)  # as root the server runs as another user, who must enter the folder
    try:
        code = report(args, soak(args, root))
    except BaseException:
        say(f"the soak broke off; its data and logs stay in {root}")
        raise
    if args.keep or code:
        say(f"data and logs kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(code)


def start_scratch_database(root: Path, db_name: str):
    """The soak's own embedded Postgres (never a shared server) with one migrated database;
    returns the server and the environment that points tickwork at it."""
    import psycopg
    from psycopg import sql as pgsql

    from tickwork.embedded import start_embedded

    server = start_embedded(root / "pg")
    say(f"embedded Postgres in {root / 'pg'} on port {server.port} (its own; never a shared one)")
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(db_name)))
    env = {**os.environ, "TICKWORK_DATABASE_URL": server.url_for(db_name)}
    say(tickwork(env, "migrate"))
    return server, env
