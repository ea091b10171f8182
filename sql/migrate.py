"""Apply migrations/ in order, forward only, safe when several processes migrate at once.

Each migration runs in its own transaction that first takes a transaction-scoped advisory lock
(no session state, so it also works behind PgBouncer), then checks schema_migrations, applies
the file and records its version, all before commit. A second migrator waits on the lock, then
sees the version recorded and skips it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg
import structlog

from tickwork.sql.db import connect_when_up

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
GRANTS_FILE = Path(__file__).parent / "grants.sql"
# An arbitrary constant: the key of tickwork's migration lock.
_MIGRATION_LOCK_KEY = 7_301_424_118

log = structlog.get_logger()


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path


def list_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = [Migration(p.stem, p) for p in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql"))]
    numbers = [m.version[:4] for m in found]
    if len(numbers) != len(set(numbers)):
        raise RuntimeError("two migrations share a number; renumber the newer one")
    return found


def migrate(url: str, *, application_name: str = "tickwork-migrate") -> list[str]:
    """Apply every pending migration; return the versions this call applied."""
    applied: list[str] = []
    with connect_when_up(url, "apply the migrations", application_name=application_name,
                         prepare_threshold=None) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            conn.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
                                version    text PRIMARY KEY,
                                applied_at timestamptz NOT NULL DEFAULT now())""")
        for migration in list_migrations():
            if _apply_one(conn, migration):
                applied.append(migration.version)
    if applied:
        log.info("migrations_applied", versions=applied)
    return applied


def apply_grants(url: str) -> None:
    """(Re)apply the least-privilege grants (sql/grants.sql) to whichever roles exist."""
    with psycopg.connect(url, application_name="tickwork-migrate", prepare_threshold=None) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            conn.execute(GRANTS_FILE.read_text())


def _apply_one(conn: psycopg.Connection, migration: Migration) -> bool:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
        done = conn.execute("SELECT 1 FROM schema_migrations WHERE version = %s",
                            (migration.version,)).fetchone()
        if done:
            return False
        conn.execute(migration.path.read_text())
        conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (migration.version,))
    return True
