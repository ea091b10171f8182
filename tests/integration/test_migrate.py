"""Migrations: forward only, recorded once, safe when two processes migrate at once."""

import subprocess
import sys

import psycopg

from tickwork.sql.migrate import list_migrations, migrate
from tests.conftest import admin_execute, database_url
from tests.integration.drivers import ROOT


def test_two_processes_migrating_at_once_apply_each_migration_exactly_once(pg_server_url):
    name = "tickwork_migrate_race"
    admin_execute(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin_execute(pg_server_url, f"CREATE DATABASE {name}")
    url = database_url(pg_server_url, name)
    script = "import sys; from tickwork.sql.migrate import migrate; print(len(migrate(sys.argv[1])))"
    runners = [subprocess.Popen([sys.executable, "-c", script, url], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True) for _ in range(3)]
    applied = [int(r.communicate(timeout=120)[0].strip().splitlines()[-1]) for r in runners]
    assert all(r.returncode == 0 for r in runners)
    # Each migration is its own locked transaction, so the work may split between processes,
    # but every migration is applied by exactly one of them.
    assert sum(applied) == len(list_migrations())
    with psycopg.connect(url) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    assert versions == [m.version for m in list_migrations()]
    assert migrate(url) == []
    admin_execute(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
