"""Helpers for worker tests: an in-process worker, worker subprocesses, and waiting on the
journal's NOTIFY (not on the clock) until the database says a condition holds."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager, contextmanager

import psycopg

from tickwork.worker_process import worker_deps
from tickwork.sql.db import connect
from tests.integration.drivers import ROOT
from tickwork.worker.run_wiring import RunDeps
from tickwork.worker.providers.routing import ProviderSettings, build_router
from tickwork.worker.runner import Worker
from tickwork.worker.settings import WorkerSettings


def run_deps(pool, **settings) -> RunDeps:
    """The process's own wiring (tickwork.worker_process.worker_deps) with the scripted models and
    a short poll interval."""
    return worker_deps(pool, WorkerSettings(**{"poll_interval_seconds": 0.2, **settings}),
                       provider=build_router(ProviderSettings(models="")),
                       worker=f"test:{os.getpid()}")


@asynccontextmanager
async def running_worker(pool, db_url: str, **settings):
    async with serving(run_deps(pool, **settings), db_url) as worker:
        yield worker


@asynccontextmanager
async def serving(deps: RunDeps, db_url: str, *, provider=None):
    """A Worker on ``deps`` in this process until the block ends; then it stops, its journal
    writer closes, and ``provider`` (one the test made, with a connection pool) closes."""
    stop = asyncio.Event()
    worker = Worker(deps, db_url)
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await deps.journal_writer.close()
        if provider is not None:
            await provider.aclose()


def hostile_deps(pool, base_url: str, models: str, *, timeout: float = 1, worker: str = "test",
                 **settings):
    """A worker's wiring whose model aliases go to an OpenAI-compatible server at ``base_url``
    (the hostile test server): (deps, provider)."""
    provider = build_router(ProviderSettings(models=models, openai_base_url=base_url,
                                             openai_timeout_seconds=timeout))
    deps = worker_deps(pool, WorkerSettings(**{"poll_interval_seconds": 0.2, **settings}),
                       provider=provider, worker=worker)
    return deps, provider


def scalar(db_url: str, sql: str, params: tuple = ()):
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchone()[0]


async def until(db_url: str, sql: str, params: tuple = (), *, timeout: float = 60) -> None:
    """Wait until ``sql`` returns true, re-checking whenever a journal or queue notification
    arrives (and once a second, in case the condition changed without one)."""
    listener = await connect(db_url, application_name="tickwork-test-until")
    await listener.execute("LISTEN tickwork_events")
    await listener.execute("LISTEN tickwork_tasks")
    deadline = time.monotonic() + timeout
    try:
        while not scalar(db_url, sql, params):
            left = deadline - time.monotonic()
            assert left > 0, f"condition never held: {sql}"
            async for _ in listener.notifies(timeout=min(1.0, left), stop_after=1):
                pass
    finally:
        await listener.close()


class WorkerProcess:
    """`tickwork worker` as a real process (for kill -9, SIGTERM and restarts)."""

    def __init__(self, db_url: str, *, concurrency: int | None = 2, **env: str) -> None:
        flag = [] if concurrency is None else ["--concurrency", str(concurrency)]  # None: env's
        # Its log lines and any traceback go to a file (a pipe nobody reads could fill and
        # stall it), for a failing test to show (log()).
        self._log = tempfile.NamedTemporaryFile(prefix="tickwork-worker-", suffix=".log")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tickwork.cli", "worker", *flag],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "TICKWORK_DATABASE_URL": db_url, "TICKWORK_TEST_MODE": "1",
                 "TICKWORK_POLL_INTERVAL_SECONDS": "0.2", **env})

    def log(self, tail: int = 20_000) -> str:
        """The last ``tail`` characters the process has written."""
        with open(self._log.name, encoding="utf-8", errors="replace") as written:
            return written.read()[-tail:]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    def terminate(self, timeout: float = 60) -> int:
        self.process.terminate()
        return self.process.wait(timeout=timeout)


@contextmanager
def claim_row_held(db_url: str, run_id):
    """An uncommitted claim row of ``run_id``: a worker's claim that picks the run waits on it
    (its ON CONFLICT waits for this transaction), holding every task it picked. Yields the
    release: a rollback, after which the waiting claim goes on."""
    holder = psycopg.connect(db_url)
    holder.execute("SET idle_in_transaction_session_timeout = 0")  # the suite's 2 s: not here
    holder.execute("INSERT INTO execution_claims (execution_id, worker_id) VALUES (%s, 'held')",
                   (run_id,))
    try:
        yield holder.rollback
    finally:
        holder.close()


def all_done(runs: int) -> str:
    """The condition (for until) that exactly ``runs`` runs completed with outcome done."""
    return (f"SELECT count(*) = {int(runs)} FROM executions"
            " WHERE status = 'completed' AND outcome = 'done'")
