"""The `tickwork` command: process verbs here, resource verbs in cli_resources."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Optional

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from tickwork.scheduler.serialize import parse_utc
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.sql.db import DatabaseSettings
from tickwork.sql.errors import TickworkError
from tickwork.sql.start_up import DatabaseUnreachable, first_line
from tickwork import cli_chat, cli_help, cli_resources, cli_secrets, cli_webhooks
from tickwork.cli_resources import JSON_OPTION, print_items
from tickwork.client import fail, say_error
from tickwork.logs import configure_logging

cli_help.install()

app = typer.Typer(help="tickwork: a Postgres-native job queue and scheduler for AI-agent runs.",
                  no_args_is_help=True, add_completion=False)
token_app = typer.Typer(help="API tokens: create, list, revoke.", no_args_is_help=True)
app.add_typer(token_app, name="token")
cli_resources.register(app)
cli_webhooks.register(app)
cli_secrets.register(app)
cli_chat.register(app)


def database_url() -> str:
    try:  # the pool sizes are checked here too, before any process starts
        url = DatabaseSettings().database_url
    except ValidationError as exc:
        fail(settings_error(exc))
    if not url:
        fail("set TICKWORK_DATABASE_URL to a Postgres URL (or use `tickwork up`, which starts an "
             "embedded Postgres)")
    return parsed_database_url(url)


def parsed_database_url(url: str) -> str:
    """``url`` once libpq can read it; else one sentence (not a traceback from the first try)."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        fail(f"TICKWORK_DATABASE_URL is not a Postgres URL (postgresql://user@host:5432/dbname or "
             f"key=value pairs): {first_line(exc)}")
    return url


def migrate_and_publish(url: str) -> None:
    from tickwork.sql.migrate import apply_grants, migrate
    from tickwork.worker.tools.publish import publish_catalog

    applied = migrate(url)
    apply_grants(url)
    tools = publish_catalog(url)
    typer.echo(f"migrations applied: {len(applied)}; tools published: {tools}")


@app.command()
def migrate() -> None:
    """Apply pending migrations and publish the tool catalog (safe to run twice at once)."""
    configure_logging()
    migrate_and_publish(database_url())


@app.command()
def api(host: str = typer.Option("127.0.0.1", help="Address to listen on."),
        port: int = typer.Option(8080, help="Port of the API and the viewer.")) -> None:
    """Serve the HTTP API and the viewer."""
    from tickwork.processes import run_api

    configure_logging()
    run_api(database_url(), scheduler_settings(), host, port)


@app.command()
def scheduler() -> None:
    """Run the minute tick (any number side by side: SKIP LOCKED keeps them apart)."""
    from tickwork.runtime import run_on_uvloop
    from tickwork.processes import serve_scheduler

    configure_logging()
    run_on_uvloop(serve_scheduler(database_url(), scheduler_settings()))


def scheduler_settings() -> SchedulerSettings:
    """The scheduler's and the API's settings, or one sentence naming the variable refused."""
    try:
        return SchedulerSettings()
    except ValidationError as exc:
        fail(settings_error(exc))


def settings_error(exc: ValidationError) -> str:
    """A setting pydantic refused, as one sentence naming its variable."""
    first = exc.errors()[0]
    name = "TICKWORK_" + "_".join(str(part) for part in first["loc"]).upper()
    message = first["msg"].removeprefix("Value error, ")
    return f"{message} ({name})" if first["loc"] else f"{message} (TICKWORK_POOL_*_SIZE)"


@app.command()
def worker(concurrency: Optional[int] = typer.Option(
        None, help="Runs at once (default: TICKWORK_CONCURRENCY, or 4). Memory is the limit.")
           ) -> None:
    """Run agent runs from the queue (any number side by side)."""
    from tickwork.runtime import run_on_uvloop
    from tickwork.worker_process import serve_worker
    from tickwork.worker.settings import WorkerSettings

    configure_logging()
    url = database_url()
    try:
        settings = WorkerSettings(**({} if concurrency is None else {"concurrency": concurrency}))
    except ValidationError as exc:
        fail(settings_error(exc))
    check_tools_file()
    run_on_uvloop(serve_worker(url, settings))


def check_tools_file() -> None:
    """A bad TICKWORK_TOOLS_FILE stops the worker before it starts, in one sentence."""
    from tickwork.worker.tools.mcp_config import ToolsFileError, load_tools_file

    try:
        load_tools_file()
    except ToolsFileError as exc:
        fail(str(exc))


@app.command()
def tick(at: Optional[str] = typer.Option(None, help="Test mode only: tick as of this UTC time.")
         ) -> None:
    """Run one tick now and print its outcome (for an external cron). Exit 1 if it failed."""
    from tickwork.processes import tick_now

    settings = scheduler_settings()
    moment = None
    if at is not None:
        if not settings.test_mode:
            fail("--at is only accepted in test mode (TICKWORK_TEST_MODE=1)")
        try:
            moment = parse_utc(at, "--at")
        except TickworkError as exc:
            fail(exc.message)
    configure_logging("warning")
    outcome = asyncio.run(tick_now(database_url(), settings, moment))
    typer.echo(json.dumps(outcome.as_dict()))
    raise typer.Exit(0 if outcome.ok else 1)


@token_app.command("create")
def token_create(
        tenant: Optional[str] = typer.Option(None, help="Tenant name (created if new)."),
        admin: bool = typer.Option(False, help="May list and revoke its tenant's tokens."),
        operator: bool = typer.Option(False, help="A cluster-wide operator token (metrics, the "
                                      "global tick, every tenant's tokens); no --tenant."),
        expires_in: Optional[str] = typer.Option(None, help="Lifetime: 90m, 12h, 30d or 2w "
                                                 "(default: until revoked).")) -> None:
    """Create a token; it is printed once, alone on the last line."""
    from tickwork.scheduler.tokens import parse_lifetime
    from tickwork.local import create_token_sync

    try:
        seconds = parse_lifetime(expires_in) if expires_in is not None else None
        token = create_token_sync(database_url(), tenant=tenant, admin=admin, operator=operator,
                                  expires_seconds=seconds)
    except TickworkError as exc:
        fail(exc.message)
    kind = "operator token" if operator else \
        f"token for tenant {tenant}{' (admin)' if admin else ''}"
    lifetime = f", expires in {expires_in}" if expires_in else ""
    typer.echo(f"{kind}{lifetime}; store it now, it is not shown again:")
    typer.echo(token)


@token_app.command("list")
def token_list(tenant: Optional[str] = typer.Option(None, help="Only this tenant's tokens."),
               as_json: bool = JSON_OPTION) -> None:
    """Tokens (never the token itself): id, tenant, kind, created, expires, last used."""
    from tickwork.scheduler.tokens import public_token
    from tickwork.local import list_tokens_sync

    try:
        items = [public_token(row) for row in list_tokens_sync(database_url(), tenant=tenant)]
    except TickworkError as exc:
        fail(exc.message)
    if as_json:
        print_items(items)
        return
    from rich.table import Table

    from tickwork.cli_resources import local_time, out
    from tickwork.local_zone import machine_zone

    zone = machine_zone()
    table = Table("id", "tenant", "kind", "created", "expires", "last used", "revoked")
    for t in items:
        kind = "operator" if t["operator"] else "admin" if t["admin"] else "tenant"
        table.add_row(t["id"], t["tenant"] or "(all)", kind, local_time(t["created_at"], zone),
                      local_time(t["expires_at"], zone) if t["expires_at"] else "never",
                      local_time(t["last_used_at"], zone), local_time(t["revoked_at"], zone))
    out.print(table)


@token_app.command("revoke")
def token_revoke(token_or_id: str = typer.Argument(..., metavar="TOKEN_OR_ID",
                                                   help="The token (tw_…) or its id.")) -> None:
    """Revoke a token (give it or its id): refused from its next request on, tickets too."""
    from tickwork.local import revoke_token_sync

    try:
        row = revoke_token_sync(database_url(), token_or_id)
    except TickworkError as exc:
        fail(exc.message)
    typer.echo(f"revoked token {row['id']}")


@app.command()
def up(port: int = typer.Option(8080, help="Port of the API and the viewer."),
       host: str = typer.Option("127.0.0.1", help="Address to listen on.")) -> None:
    """Run everything on this machine (API, viewer, scheduler, a worker), on an embedded
    Postgres unless TICKWORK_DATABASE_URL is set; one `up` per data folder."""
    from tickwork.local import run_up

    configure_logging("warning")
    check_tools_file()
    url = os.environ.get("TICKWORK_DATABASE_URL", "")
    run_up(url and parsed_database_url(url), host=host, port=port,
           migrate_and_publish=migrate_and_publish)


def main() -> None:
    try:
        app()
    except psycopg.OperationalError as exc:
        # Postgres not there at start-up (DatabaseUnreachable says how long it was waited for),
        # or lost past what was retried: the reason in one sentence, not a traceback.
        say_error(str(exc) if isinstance(exc, DatabaseUnreachable)
                  else f"the connection to Postgres failed: {first_line(exc)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
