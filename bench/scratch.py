"""What every bench shares: printing as it goes, and a scratch database on the server named by
TICKWORK_DATABASE_URL (else on an embedded Postgres started for the bench), dropped after."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo

from sql.embedded import start_embedded


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
    server = start_embedded(root)
    say(f"server: embedded Postgres in {root} on port {server.port}")
    try:
        with _fresh_database(server.url, name) as url:
            yield url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


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


def redacted(url: str) -> str:
    return url.split("@")[-1] if "@" in url else url
