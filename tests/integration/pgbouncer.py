"""Debian's PgBouncer as a real process in transaction mode, in front of one test database.

Clients connect to it on a free loopback port without a password (auth_type trust: the test
owns the port); it connects to Postgres with the test database's own URL. PgBouncer refuses
to run as root, so as root it is started as the unprivileged user `nobody`, with its
configuration in a folder that user can read.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
DATABASE = "bounced"


def available() -> bool:
    return Path(BINARY).exists()


class PgBouncer:
    def __init__(self, target_url: str) -> None:
        target = conninfo_to_dict(target_url)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.folder = Path(tempfile.mkdtemp(prefix="tickwork-pgbouncer-"))
        self.folder.chmod(0o755)
        backend = " ".join(f"{key}={value}" for key, value in (
            ("host", target.get("host", "127.0.0.1")), ("port", target.get("port", 5432)),
            ("dbname", target["dbname"]), ("user", target.get("user", "postgres")),
            ("password", target.get("password"))) if value)
        config = self.folder / "pgbouncer.ini"
        config.write_text(f"""[databases]
{DATABASE} = {backend}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.folder / 'users.txt'}
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
""")
        # trust still wants each user listed; the password column is not read
        (self.folder / "users.txt").write_text('"postgres" ""\n')
        for path in self.folder.iterdir():
            path.chmod(0o644)
        as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
        self._log = open(self.folder / "pgbouncer.log", "w")
        self.process = subprocess.Popen([BINARY, *as_user, str(config)], stdout=self._log,
                                        stderr=subprocess.STDOUT)
        self.url = make_conninfo(f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}")
        try:
            self._ready()
        except BaseException:
            self.process.kill()
            self.process.wait(timeout=30)
            raise

    def _ready(self) -> None:
        for _ in range(200):  # a process that starts: no event to wait on but its port
            assert self.process.poll() is None, self.log()
            try:
                psycopg.connect(self.url, connect_timeout=2, prepare_threshold=None).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.05)
        raise AssertionError(f"pgbouncer never accepted a connection:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return (self.folder / "pgbouncer.log").read_text()[-5000:]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
