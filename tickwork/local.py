"""`tickwork up` and the token verbs: the pieces that need a database but no API."""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
from pathlib import Path
from typing import IO, Any, Callable

import psycopg
import typer

from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.tokens import authenticate, create_token, list_tokens, revoke_token
from tickwork.sql.db import connect
from tickwork.sql.errors import TickworkError, Unauthorized
from tickwork.client import fail
from tickwork.runtime import run_on_uvloop

LOCAL_TENANT = "local"
TOKEN_FILE = "local-admin-token"
SECRET_KEY_FILE = "secret-key"
UP_LOCK_FILE = "up.lock"


class NotTheOwner(TickworkError):
    code = "not_the_owner"


def _with_conn(url: str, work) -> Any:
    async def run() -> Any:
        conn = await connect(url, application_name="tickwork-cli")
        try:
            return await work(conn)
        except psycopg.errors.InsufficientPrivilege:
            user = conn.info.user
            raise NotTheOwner(
                f"the database role {user!r} may not manage tenants and tokens; run this with "
                "the owner's TICKWORK_DATABASE_URL (with compose: `docker compose run --rm "
                "migrate tickwork token …`)") from None
        finally:
            await conn.close()
    return asyncio.run(run())


def create_token_sync(url: str, *, tenant: str | None, admin: bool = False,
                      operator: bool = False, expires_seconds: int | None = None) -> str:
    return _with_conn(url, lambda conn: create_token(
        conn, tenant=tenant, admin=admin, operator=operator, expires_seconds=expires_seconds))


def list_tokens_sync(url: str, *, tenant: str | None) -> list[dict[str, Any]]:
    return _with_conn(url, lambda conn: list_tokens(conn, tenant=tenant))


def revoke_token_sync(url: str, token_or_id: str) -> dict[str, Any]:
    return _with_conn(url, lambda conn: revoke_token(conn, token_or_id))


def local_admin_token(url: str, data_root: Path) -> str:
    """The admin token of tenant `local`, kept 0600 in the data folder and reused while the
    database still takes it (a revoked, expired or foreign one is replaced): `up` does not
    mint a new token on every start."""
    path = data_root / TOKEN_FILE
    if path.exists():
        kept = path.read_text().strip()
        try:
            principal = _with_conn(url, lambda conn: authenticate(conn, kept))
            if principal.is_admin and not principal.is_operator:
                return kept
        except Unauthorized:
            pass  # replaced below
    token = create_token_sync(url, tenant=LOCAL_TENANT, admin=True)
    write_private(path, token)
    return token


def write_private(path: Path, text: str) -> None:
    """Write ``text`` (and a newline) to ``path``, readable by this user only: created 0600
    from the start (O_EXCL on a fresh name), so it is never readable by others, not even for a
    moment; then moved over the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.{os.getpid()}")
    fresh.unlink(missing_ok=True)  # left by a start that died here
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.replace(fresh, path)


def local_secret_key(data_root: Path) -> None:
    """Without TICKWORK_SECRET_KEY, `up` seals tenants' secrets with a key of its own, kept
    0600 in the data folder (made on the first start, reused after) and set for its API and
    worker. Lose the folder and the stored secrets cannot be opened: set them again."""
    if os.environ.get("TICKWORK_SECRET_KEY"):
        return
    from tickwork.sql.sealed import new_key

    path = data_root / SECRET_KEY_FILE
    if not path.exists():
        write_private(path, new_key())
    os.environ["TICKWORK_SECRET_KEY"] = path.read_text().strip()


def run_up(url: str, *, host: str, port: int, migrate_and_publish: Callable[[str], None]) -> None:
    from tickwork.embedded import default_data_root
    from tickwork.processes import serve_api

    embedded = None
    data_root = default_data_root()
    # Before anything else: a second `up` on the same data must not touch the embedded
    # Postgres, the token or the port of the one already running. The lock dies with us.
    created = [p for p in [data_root, *data_root.parents] if not p.exists()]
    lock = hold_up_lock(data_root, f"http://{host}:{port}")
    check_port_free(host, port)  # before "tickwork is up" is printed, not after
    if not url:
        from tickwork.embedded import EmbeddedPostgresError, start_embedded

        try:
            embedded = start_embedded(data_root)
        except EmbeddedPostgresError as exc:
            # Refused before anything ran (e.g. a private folder on the way): leave no trace
            # of this attempt, then say why in the error's own words, without a traceback.
            lock.close()
            (data_root / UP_LOCK_FILE).unlink(missing_ok=True)
            for folder in created:  # ours, deepest first; rmdir leaves a non-empty one alone
                try:
                    folder.rmdir()
                except OSError:
                    break
            fail(str(exc))
        url = embedded.url
    try:
        migrate_and_publish(url)
        token = local_admin_token(url, data_root)
        local_secret_key(data_root)
        typer.echo(f"tickwork is up: API http://{host}:{port}  database {redact_url(url)}")
        typer.echo(f"viewer: http://{host}:{port}/ (paste the token below when it asks)")
        typer.echo(f"export TICKWORK_API_URL=http://{host}:{port} TICKWORK_TOKEN={token}",
                   color=False)
        run_on_uvloop(serve_api(url, SchedulerSettings(), host, port, with_scheduler=True,
                                with_worker=True))
    finally:
        if embedded is not None:
            embedded.stop()
        lock.close()


def hold_up_lock(data_root: Path, api_url: str) -> IO[str]:
    """Hold `<data root>/up.lock` (flock, released when this process ends, however it ends) or
    refuse at once, naming the `up` that holds it. Only creates the data folder if it is new."""
    try:
        for folder in reversed([p for p in [data_root, *data_root.parents] if not p.exists()]):
            folder.mkdir(exist_ok=True)
            os.chmod(folder, 0o755)  # whatever the umask: the embedded server's user traverses it
        handle = open(data_root / UP_LOCK_FILE, "a+")
    except OSError as exc:
        fail(f"cannot use the data folder {data_root}: {exc.strerror}; set TICKWORK_DATA_DIR "
             "to a folder you may write")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        fail(f"tickwork is already running on the data folder {data_root} ({holder}); stop it "
             "first, or give this one its own folder with TICKWORK_DATA_DIR")
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, API {api_url}\n")
    handle.flush()
    return handle


def check_port_free(host: str, port: int) -> None:
    """Refuse in one sentence when the API's port is taken (as uvicorn would bind it, with
    SO_REUSEADDR); the embedded Postgres and the token are not touched then."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            fail(f"cannot listen on {host}:{port} ({exc.strerror}): another program uses that "
                 "port; pass --port with a free one")


def redact_url(url: str) -> str:
    """A database URL without its password (the embedded one has one since it asks for it)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
