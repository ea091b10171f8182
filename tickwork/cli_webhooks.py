"""`tickwork webhook add | list | rm | deliveries`: a tenant's webhooks, through the HTTP API."""

from __future__ import annotations

from typing import List, get_args
from uuid import UUID

import typer
from rich.table import Table

from tickwork.cli_resources import JSON_OPTION, print_items
from tickwork.client import ApiClient, ApiError, fail
from tickwork.local_zone import machine_zone
from tickwork.sql.vocabulary import WebhookEvent
from tickwork.terminal_text import plain_cells

EVENTS = get_args(WebhookEvent)
webhook_app = typer.Typer(help="Webhooks: signed POSTs when a person is needed or a run ends.",
                          no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook")


def check_id(webhook_id: str) -> None:
    try:
        UUID(webhook_id)
    except ValueError:
        fail(f"{webhook_id[:60]!r} is not a webhook id; ids are UUIDs, see `tickwork webhook "
             "list`")


@webhook_app.command("add")
def add_webhook(
        url: str = typer.Argument(..., metavar="URL", help="http(s) URL that receives the POSTs."),
        event: List[str] = typer.Option(..., "--event", metavar="EVENT",
                                        help="Repeat for each event: " + ", ".join(EVENTS) + ".")
) -> None:
    """Add a webhook; its signing secret is printed once, alone on the last line."""
    from tickwork.cli_resources import call, out

    created = call(ApiClient(), "POST", "/v1/webhooks", json={"url": url, "events": event})
    out.print(f"created webhook {created['id']} for {', '.join(created['events'])}",
              highlight=False)
    out.print("its signing secret (Tickwork-Signature); store it now, it is not shown again:",
              highlight=False)
    typer.echo(created["secret"])


@webhook_app.command("list")
def list_webhooks(as_json: bool = JSON_OPTION) -> None:
    """Webhooks: id, URL, events, created (never the secret)."""
    from tickwork.cli_resources import local_time, out

    try:
        items = ApiClient().items("/v1/webhooks")
    except ApiError as exc:
        fail(exc.message)
    if as_json:
        print_items(items)
        return
    zone = machine_zone()
    table = Table("id", "url", "events", "created")
    for hook in items:
        table.add_row(*plain_cells(hook["id"], hook["url"], ", ".join(hook["events"]),
                                   local_time(hook["created_at"], zone)))
    out.print(table)


@webhook_app.command("rm")
def remove_webhook(webhook_id: str = typer.Argument(..., metavar="ID",
                                                    help="The webhook's id (webhook list).")
                   ) -> None:
    """Remove a webhook; its pending deliveries are dropped."""
    from tickwork.cli_resources import call, out

    check_id(webhook_id)
    call(ApiClient(), "DELETE", f"/v1/webhooks/{webhook_id}")
    out.print(f"removed webhook {webhook_id}", highlight=False)


@webhook_app.command("deliveries")
def list_deliveries(
        webhook_id: str = typer.Argument(..., metavar="ID", help="The webhook's id."),
        as_json: bool = JSON_OPTION) -> None:
    """A webhook's delivery log, newest first: status, attempts, last answer, next attempt."""
    from tickwork.cli_resources import local_time, out

    check_id(webhook_id)
    try:
        items = ApiClient().items(f"/v1/webhooks/{webhook_id}/deliveries")
    except ApiError as exc:
        fail(exc.message)
    if as_json:
        print_items(items)
        return
    zone = machine_zone()
    table = Table("id", "type", "status", "attempts", "last answer", "next attempt", "created")
    for d in items:
        answer = d["last_error"] or (f"HTTP {d['last_status_code']}"
                                     if d["last_status_code"] else None)
        table.add_row(*plain_cells(d["id"], d["type"], d["status"], d["attempts"], answer,
                                   local_time(d["next_attempt_at"], zone),
                                   local_time(d["created_at"], zone)))
    out.print(table)
