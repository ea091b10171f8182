"""A process started before its database waits for it, says why at every try, and gives up in
one sentence (sql/start_up.py).

"Not up yet" is a database that does not exist yet on the suite's server: the server answers
each try at once with its reason, and the test creates the database when it wants the next try
to succeed. A port nobody listens on is the other kind of absent server.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from structlog.testing import capture_logs

from tests.conftest import admin_execute
from tickwork.sql.db import connect_when_up, open_pool
from tickwork.sql.start_up import DatabaseUnreachable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICKWORK = [sys.executable, "-m", "tickwork.cli"]


@pytest.fixture
def later_db(pg_server_url):
    """(url, name) of a database that does not exist until the test creates it."""
    name = f"tickwork_later_{os.getpid()}_{id(object())}"
    yield make_conninfo(pg_server_url, dbname=name), name
    admin_execute(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def closed_port_url() -> str:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


async def said(logs: list[dict], event: str) -> dict:
    while not any(entry["event"] == event for entry in logs):
        await asyncio.sleep(0.01)
    return next(entry for entry in logs if entry["event"] == event)


async def test_open_pool_waits_for_postgres_and_opens_once_it_answers(later_db, pg_server_url):
    url, name = later_db
    with capture_logs() as logs:
        opening = asyncio.create_task(open_pool(url, application_name="tickwork-test-later",
                                                min_size=2, max_size=2))
        first_try = await asyncio.wait_for(said(logs, "waiting_for_postgres"), 30)
        assert not opening.done()
        admin_execute(pg_server_url, f"CREATE DATABASE {name}")
        pool = await asyncio.wait_for(opening, 60)
    try:
        async with pool.connection() as conn:
            answer = await (await conn.execute("SELECT current_database() AS db")).fetchone()
        assert answer["db"] == name
    finally:
        await pool.close()
    assert first_try["step"] == "open the connection pool" and first_try["log_level"] == "warning"
    assert f'database "{name}" does not exist' in first_try["error"]


async def test_open_pool_gives_up_after_the_wait_with_the_servers_reason(later_db, monkeypatch):
    url, name = later_db
    monkeypatch.setenv("TICKWORK_DATABASE_WAIT_S", "0.5")
    with pytest.raises(DatabaseUnreachable) as refused:
        await open_pool(url, application_name="tickwork-test-later")
    message = str(refused.value)
    assert message.startswith("could not connect to Postgres to open the connection pool (tried ")
    assert "in 0.5 s, TICKWORK_DATABASE_WAIT_S)" in message
    assert message.endswith(f'database "{name}" does not exist')
    assert isinstance(refused.value, psycopg.OperationalError)  # still one, for its old callers


def test_a_blocking_first_step_waits_the_same_way(later_db, pg_server_url, monkeypatch):
    url, name = later_db
    monkeypatch.setenv("TICKWORK_DATABASE_WAIT_S", "0")
    with pytest.raises(DatabaseUnreachable, match=r"to apply the migrations \(tried once in 0 s"):
        connect_when_up(url, "apply the migrations")
    admin_execute(pg_server_url, f"CREATE DATABASE {name}")
    with connect_when_up(url, "apply the migrations") as conn:
        assert conn.execute("SELECT current_database()").fetchone()[0] == name


@pytest.mark.parametrize("verb", [["migrate"], ["worker"], ["scheduler"]])
def test_a_process_verb_without_its_database_exits_with_one_sentence(verb):
    url = closed_port_url()
    env = {**os.environ, "TICKWORK_DATABASE_URL": url, "TICKWORK_DATABASE_WAIT_S": "1",
           "COLUMNS": "400"}
    done = subprocess.run([*TICKWORK, *verb], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    port = conninfo_to_dict(url)["port"]
    [sentence] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert sentence.startswith("error: could not connect to Postgres to ")
    assert f'port {port} failed: Connection refused' in sentence
    assert "Traceback" not in done.stderr
    tries = [line for line in done.stdout.splitlines() + done.stderr.splitlines()
             if '"waiting_for_postgres"' in line]
    assert tries and all("Connection refused" in line for line in tries)


def test_a_bad_wait_is_refused_in_one_sentence_naming_the_variable():
    env = {**os.environ, "TICKWORK_DATABASE_URL": closed_port_url(),
           "TICKWORK_DATABASE_WAIT_S": "-1", "COLUMNS": "400"}
    done = subprocess.run([*TICKWORK, "worker"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr.strip()) == (
        1, "error: Input should be greater than or equal to 0 (TICKWORK_DATABASE_WAIT_S)")


@pytest.mark.parametrize("verb", [["migrate"], ["up", "--port", "1"]])
def test_a_url_libpq_cannot_read_is_refused_in_one_sentence(verb, tmp_path):
    env = {**os.environ, "TICKWORK_DATABASE_URL": "postgres at the usual place",
           "TICKWORK_DATA_DIR": str(tmp_path), "COLUMNS": "400"}
    done = subprocess.run([*TICKWORK, *verb], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: TICKWORK_DATABASE_URL is not a Postgres URL (postgresql://user@host:5432/dbname"
        " or key=value pairs): ")
    assert len(done.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
