"""Every test talks to a real Postgres.

The server is TICKWORK_TEST_DATABASE_URL (a role that may create databases) or, when unset,
an embedded Postgres started once per session. A template database is migrated once; each
test gets its own database copied from it, with idle_in_transaction_session_timeout = 2s so
that any transaction held open across slow work is killed and the test fails.

The shell's TICKWORK_* variables are removed at import (all but the suite's own knobs), so a
developer's exported settings cannot change a result.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

# The suite is configured by these variables alone. Every other TICKWORK_* variable in the
# developer's shell (a concurrency, a token budget, a model's address, armed failpoints) would
# change what the tests see, so it is removed before any project module reads its settings;
# the processes tests start inherit this cleaned environment.
SUITE_ENV = {"TICKWORK_TEST_DATABASE_URL", "TICKWORK_FUZZ_EXAMPLES", "TICKWORK_CHROMIUM"}
SUITE_ENV_PREFIXES = ("TICKWORK_REALMODEL_",)  # where the realmodel lane's server lives


def clean_environment(environ: dict | os._Environ = os.environ) -> list[str]:
    """Remove every TICKWORK_* variable the suite is not configured by; returns their names."""
    dropped = [name for name in environ if name.startswith("TICKWORK_")
               and name not in SUITE_ENV and not name.startswith(SUITE_ENV_PREFIXES)]
    for name in dropped:
        del environ[name]
    return dropped


clean_environment()
os.environ["TICKWORK_TEST_MODE"] = "1"
# Tenants' secrets are sealed with a key of the session's own (the processes tests start get it
# too); a test of a deployment without one removes it.
os.environ["TICKWORK_SECRET_KEY"] = "".join(
    __import__("base64").urlsafe_b64encode(os.urandom(32)).decode())

# Project modules only after the clean-up: some read their settings when imported.
from tickwork.sql.migrate import migrate
from tickwork.worker.tools.publish import publish_catalog


def database_url(server_url: str, dbname: str) -> str:
    return make_conninfo(server_url, dbname=dbname)


def admin_execute(server_url: str, statement: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="session")
def pg_server_url():
    url = os.environ.get("TICKWORK_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from tickwork.embedded import start_embedded

    root = Path(tempfile.mkdtemp(prefix="tickwork-test-pg-", dir="/tmp"))
    root.chmod(0o755)  # our own new folder: the unprivileged server user must traverse it
    server = start_embedded(root)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_server_url):
    name = f"tickwork_tpl_{os.getpid()}"
    admin_execute(pg_server_url, f"DROP DATABASE IF EXISTS {name}")
    admin_execute(pg_server_url, f"CREATE DATABASE {name}")
    migrate(database_url(pg_server_url, name))
    publish_catalog(database_url(pg_server_url, name))
    yield name
    admin_execute(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_counter = iter(range(1, 1_000_000))


@pytest.fixture
def db_url(pg_server_url, template_db):
    name = f"tickwork_t_{os.getpid()}_{next(_counter)}"
    admin_execute(pg_server_url, f"CREATE DATABASE {name} TEMPLATE {template_db}")
    admin_execute(pg_server_url,
                  f"ALTER DATABASE {name} SET idle_in_transaction_session_timeout = '2s'")
    yield database_url(pg_server_url, name)
    admin_execute(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def pool(db_url):
    from tickwork.sql.db import open_pool

    pool = await open_pool(db_url, application_name="tickwork-test", max_size=8)
    yield pool
    await pool.close()


@pytest.fixture
def settings():
    from tickwork.scheduler.settings import SchedulerSettings

    # Every in-process client comes from one address, and the auth tests fail on purpose many
    # times: the failed-token brake is off here and tested on its own (test_throttle.py).
    return SchedulerSettings(test_mode=True, auth_failure_limit=0)


@pytest.fixture
async def tokens(pool):
    """Tokens of two tenants, acme (admin) and globex (not admin), and a cluster operator's."""
    from tickwork.scheduler.tokens import create_token

    async with pool.connection() as conn:
        return {"acme": await create_token(conn, tenant="acme", admin=True),
                "globex": await create_token(conn, tenant="globex", admin=False),
                "operator": await create_token(conn, operator=True)}


@pytest.fixture
async def api(pool, settings, tokens):
    """An HTTP client of the real app (in-process ASGI), authenticated as tenant acme."""
    import httpx

    from tickwork.scheduler.api.app import create_app

    app = create_app(settings, pool=pool)
    transport = httpx.ASGITransport(app=app)  # which runs no lifespan: the fixture does
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=transport, base_url="http://tickwork.test",
            headers={"Authorization": f"Bearer {tokens['acme']}"}) as client:
        client.tokens = tokens
        client.app = app
        yield client


@pytest.fixture
async def live_api(pool, settings, tokens):
    """The real app served by uvicorn on a free loopback port (streaming needs a real server)."""
    import asyncio
    import socket

    import uvicorn

    from tickwork.scheduler.api.app import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(settings, pool=pool)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on", timeout_graceful_shutdown=2))
    server.install_signal_handlers = lambda: None
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield {"url": f"http://127.0.0.1:{port}", "app": app, "tokens": tokens, "server": server}
    server.should_exit = True
    await task  # the app's lifespan stopped its hub
