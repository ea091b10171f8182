"""A second `tickwork up` on the data folder of one that runs refuses at once, in one line, and
touches nothing: not the embedded Postgres, not the kept token, not the running API. Real
processes throughout."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.integration.drivers import ROOT
from tests.integration.test_cli import TICKWORK, Up, free_port


def second_up(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*TICKWORK, "up", "--port", str(free_port())], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file tickwork itself keeps in the data folder (not the server's own files, which
    the running server writes to as it pleases), with its modification time and bytes."""
    kept = [folder / name for name in ("local-admin-token", "postgres-password", "port",
                                       "up.lock", "pgdata/postmaster.pid",
                                       "pgdata/pg_hba.conf")]
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept if p.exists()}


def assert_refused(done: subprocess.CompletedProcess, folder: Path, first: Up) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""  # no "tickwork is up", no token
    [line] = done.stderr.strip().splitlines()
    assert "already running on the data folder" in line and str(folder) in line
    assert f"pid {first.process.pid}" in line and first.url in line


def test_a_second_up_on_an_embedded_postgres_refuses_and_touches_nothing():
    folder = Path(tempfile.mkdtemp(prefix="tickwork-up2-", dir="/tmp"))
    folder.chmod(0o755)  # our own new folder: the unprivileged server user must traverse it
    env = {k: v for k, v in os.environ.items() if k != "TICKWORK_DATABASE_URL"}
    env["TICKWORK_DATA_DIR"] = str(folder)
    try:
        first = Up(env)
        before = snapshot(folder)
        assert {"local-admin-token", "postmaster.pid", "up.lock"} <= set(before)

        assert_refused(second_up(env), folder, first)

        assert snapshot(folder) == before  # same postmaster, same token, same password
        headers = {"Authorization": f"Bearer {first.token}"}
        assert httpx.get(f"{first.url}/healthz", timeout=5).status_code == 200
        assert httpx.get(f"{first.url}/v1/agents", headers=headers, timeout=5).status_code == 200
        first.stop()  # exits 0: its database was never stopped under it

        again = Up(env)  # the lock went with the first process: the folder is usable again
        assert again.token == first.token
        again.stop()
    finally:
        from tickwork.embedded import start_embedded

        start_embedded(folder).stop()  # whatever happened above, leave no server behind
        shutil.rmtree(folder, ignore_errors=True)


def test_a_second_up_on_an_external_database_refuses_while_the_first_serves(db_url, tmp_path):
    env = {**os.environ, "TICKWORK_DATABASE_URL": db_url, "TICKWORK_DATA_DIR": str(tmp_path)}
    first = Up(env)
    try:
        token_file = tmp_path / "local-admin-token"
        kept = (token_file.stat().st_mtime_ns, token_file.read_text())

        assert_refused(second_up(env), tmp_path, first)

        assert (token_file.stat().st_mtime_ns, token_file.read_text()) == kept
        assert httpx.get(f"{first.url}/healthz", timeout=5).status_code == 200
        other = {**env, "TICKWORK_DATA_DIR": str(tmp_path / "other")}
        beside = Up(other)  # another data folder is another `up`: allowed
        beside.stop()
    finally:
        first.stop()


def test_up_on_a_taken_port_refuses_before_it_says_it_is_up(db_url, tmp_path):
    import socket

    env = {**os.environ, "TICKWORK_DATABASE_URL": db_url, "TICKWORK_DATA_DIR": str(tmp_path)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*TICKWORK, "up", "--port", str(port)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""  # no "tickwork is up", no token
    [line] = done.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port" in line
    assert not (tmp_path / "local-admin-token").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the embedded server's own user exists as root")
def test_an_embedded_start_refused_on_a_private_folder_leaves_no_trace(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "TICKWORK_DATABASE_URL"}
    env["TICKWORK_DATA_DIR"] = str(private / "a" / "b")
    done = second_up(env)
    assert done.returncode == 1 and done.stdout == ""
    assert "tickwork does not loosen private folders" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(private.iterdir()) == []  # the folders this attempt made are gone again
