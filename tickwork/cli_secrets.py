"""`tickwork secret set | list | rm` (a tenant's secrets, through the HTTP API, with an admin
token), `secret new-key` (a key for TICKWORK_SECRET_KEY) and `secret rotate` (every stored
value sealed again under the first key, as the database owner)."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from tickwork.cli_resources import JSON_OPTION, print_items
from tickwork.client import ApiClient, ApiError, fail
from tickwork.local_zone import machine_zone
from tickwork.terminal_text import plain_cells

secret_app = typer.Typer(help="Secrets: values a tenant's tools read with ctx.secret(name).",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(secret_app, name="secret")


def read_value() -> str:
    """The value from standard input (never an argument: it would stay in the shell's
    history and in the process list), without the newline that ends a typed or piped line."""
    if sys.stdin.isatty():
        typer.echo("value (then Enter, Ctrl-D):", err=True)
    value = sys.stdin.read()
    value = value[:-1] if value.endswith("\n") else value
    if not value:
        fail("no value was given on standard input, e.g. `printf %s \"$KEY\" | tickwork secret "
             "set NAME`")
    return value


@secret_app.command("set")
def set_secret(name: str = typer.Argument(..., metavar="NAME", help="e.g. STRIPE_API_KEY")) -> None:
    """Set a secret; its value is read from standard input and never printed."""
    from tickwork.cli_resources import call, out

    saved = call(ApiClient(), "POST", "/v1/secrets", json={"name": name, "value": read_value()})
    out.print(f"set secret {saved['name']}", highlight=False)


@secret_app.command("list")
def list_secrets(as_json: bool = JSON_OPTION) -> None:
    """Secrets: name, created, updated (never a value)."""
    from tickwork.cli_resources import local_time, out

    try:
        items = ApiClient().call("GET", "/v1/secrets")["items"]
    except ApiError as exc:
        fail(exc.message)
    if as_json:
        print_items(items)
        return
    zone = machine_zone()
    table = Table("name", "created", "updated")
    for item in items:
        table.add_row(*plain_cells(item["name"], local_time(item["created_at"], zone),
                                   local_time(item["updated_at"], zone)))
    out.print(table)


@secret_app.command("rm")
def remove_secret(name: str = typer.Argument(..., metavar="NAME")) -> None:
    """Remove a secret."""
    from urllib.parse import quote

    from tickwork.cli_resources import call, out

    call(ApiClient(), "DELETE", f"/v1/secrets/{quote(name, safe='')}")
    out.print(f"removed secret {name}", highlight=False)


@secret_app.command("new-key")
def new_key() -> None:
    """Print a new key for TICKWORK_SECRET_KEY (to rotate: put it first, comma, the old one)."""
    from tickwork.sql.sealed import new_key as make

    typer.echo(make())


@secret_app.command("rotate")
def rotate() -> None:
    """Seal every stored value again under the first key (as the database owner)."""
    from tickwork.cli import database_url
    from tickwork.sql.sealed import SecretBox, SecretsUnavailable, reseal_all

    try:
        count = reseal_all(database_url(), SecretBox.from_settings())
    except SecretsUnavailable as exc:
        fail(exc.message)
    typer.echo(f"sealed again under the first key: {count} secrets")
