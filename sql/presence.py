"""A worker's presence in the database, so that the sweep can tell a run lost with its worker
from a run that timed out (migration 0064).

Each worker process holds a session advisory lock keyed on its worker id, on the connection it
LISTENs on, for as long as it lives (through its shutdown's grace period too). Postgres drops
the lock with the session: a worker killed with SIGKILL, by the OOM killer or with its host is
gone from pg_locks at once. The sweep then gives the attempt back to the run it held (up to 5
times in a chain) instead of counting it against the agent's max_attempts.

The lock only ever gives attempts back, so being wrong about it is cheap: a live worker whose
LISTEN connection is reconnecting looks gone for a moment (a run of it swept at its deadline
then gets one more attempt), and a worker that could not take its lock (an id given twice)
looks present (its lost runs count, as they did before presence). The lock is taken as the
LISTEN connection opens, which a new worker's first claim may beat by a few milliseconds; the
worker does not wait for it, because the listener is a hint its claims never depend on."""

from __future__ import annotations

import psycopg
import structlog

from tickwork.sql import QUERIES

log = structlog.get_logger()
PRESENCE_KEY = 1953064811  # "tick"; the view worker_presences (0064) reads the same key


async def hold_presence(conn: psycopg.AsyncConnection, worker_id: str) -> None:
    """Take the worker's presence lock on ``conn`` (autocommit: held until it closes)."""
    cursor = await conn.execute(QUERIES["hold_worker_presence"],
                                {"key": PRESENCE_KEY, "worker_id": worker_id})
    if not (await cursor.fetchone())["held"]:
        log.warning("worker_presence_not_held", worker_id=worker_id,
                    why="another session holds this worker id's presence lock")
