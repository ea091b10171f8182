"""Webhooks on the API side: check what a tenant asks for, store it with a new secret (shown
once), list and remove webhooks, and read a webhook's delivery log. Delivery itself is the
worker's (worker/webhooks/); events are queued by triggers in the database (migration 0034)."""

from __future__ import annotations

import secrets
from typing import Any, get_args
from urllib.parse import urlsplit
from uuid import UUID

from psycopg import AsyncConnection
from pydantic import BaseModel, ConfigDict, Field

from tickwork.scheduler.pagination import decode_cursor, page
from tickwork.scheduler.serialize import pick
from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, InvalidInput, NotFound
from tickwork.sql.ids import new_id
from tickwork.sql.vocabulary import WebhookEvent

EVENTS: tuple[WebhookEvent, ...] = get_args(WebhookEvent)
MAX_URL_CHARS = 2000
MAX_PER_TENANT = 20
WEBHOOK_FIELDS = ("id", "url", "events", "created_at")
DELIVERY_FIELDS = ("id", "type", "status", "attempts", "last_status_code", "last_error",
                   "next_attempt_at", "last_attempt_at", "delivered_at", "created_at", "data")
HINT = "list webhooks with GET /v1/webhooks (or `tickwork webhook list`)"


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="http(s) URL that receives a signed POST per event")
    events: list[str] = Field(description="any of " + ", ".join(EVENTS))


def check_url(url: str) -> str:
    """An absolute http(s) URL with a host, without credentials; else a sentence why not."""
    if len(url) > MAX_URL_CHARS:
        raise InvalidInput(f"url is {len(url)} characters long; at most {MAX_URL_CHARS} are "
                           "allowed", code="invalid_webhook_url", field="url")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise InvalidInput("url may not contain spaces or control characters",
                           code="invalid_webhook_url", field="url")
    try:
        parts = urlsplit(url)
        parts.port  # raises ValueError for a port that is not a number in 0..65535
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"url {url[:80]!r} must be an http:// or https:// URL with a host, "
                           "e.g. https://example.com/hooks/tickwork",
                           code="invalid_webhook_url", field="url")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("url may not carry a user name or password; check the "
                           "Tickwork-Signature header instead to know a delivery is ours",
                           code="invalid_webhook_url", field="url")
    return url


def check_events(events: list[str]) -> list[str]:
    """Known event names, each once, in the order given; else a sentence naming the bad one."""
    if not events:
        raise InvalidInput("events must name at least one of: " + ", ".join(EVENTS),
                           code="invalid_webhook_events", field="events")
    for event in events:
        if event not in EVENTS:
            raise InvalidInput(f"unknown event {event[:60]!r}; events are "
                               + ", ".join(EVENTS), code="invalid_webhook_events",
                               field="events")
    return list(dict.fromkeys(events))


def public_webhook(row: dict[str, Any]) -> dict[str, Any]:
    return pick(row, WEBHOOK_FIELDS)


def public_delivery(row: dict[str, Any]) -> dict[str, Any]:
    shown = pick(row, DELIVERY_FIELDS)
    if row["status"] != "pending":
        shown["next_attempt_at"] = None  # nothing more will be tried
    return shown


async def create_webhook(conn: AsyncConnection, tenant_id: UUID, body: WebhookIn
                         ) -> dict[str, Any]:
    """Store a webhook with a new signing secret; the answer is the only place it is shown."""
    url, events = check_url(body.url), check_events(body.events)
    secret = "whsec_" + secrets.token_urlsafe(32)
    row = await (await conn.execute(QUERIES["insert_webhook"], {
        "id": new_id(), "tenant_id": tenant_id, "url": url, "events": events,
        "secret": secret, "max_per_tenant": MAX_PER_TENANT})).fetchone()
    if row is None:
        error = Conflict(f"this tenant already has {MAX_PER_TENANT} webhooks, the most it may "
                         "have; remove one first (`tickwork webhook rm ID`)")
        error.code = "too_many_webhooks"
        raise error
    return {**public_webhook(row), "secret": secret}


async def list_webhooks(conn: AsyncConnection, tenant_id: UUID, *, limit: int,
                        cursor: str | None) -> dict[str, Any]:
    rows = await (await conn.execute(QUERIES["list_webhooks"], {
        "tenant_id": tenant_id, "cursor": decode_cursor(cursor), "limit": limit + 1})).fetchall()
    return page(rows, limit, public_webhook)


async def delete_webhook(conn: AsyncConnection, tenant_id: UUID, webhook_id: UUID) -> None:
    """Remove it and its deliveries; another tenant's webhook is not found, like a missing one."""
    row = await (await conn.execute(QUERIES["delete_webhook"], {
        "id": webhook_id, "tenant_id": tenant_id})).fetchone()
    if row is None:
        raise NotFound("webhook", webhook_id, HINT)


async def list_deliveries(conn: AsyncConnection, tenant_id: UUID, webhook_id: UUID, *,
                          limit: int, cursor: str | None) -> dict[str, Any]:
    """A webhook's delivery log, newest first."""
    found = await (await conn.execute(QUERIES["get_webhook"], {
        "id": webhook_id, "tenant_id": tenant_id})).fetchone()
    if found is None:
        raise NotFound("webhook", webhook_id, HINT)
    rows = await (await conn.execute(QUERIES["list_webhook_deliveries"], {
        "webhook_id": webhook_id, "tenant_id": tenant_id, "cursor": decode_cursor(cursor),
        "limit": limit + 1})).fetchall()
    return page(rows, limit, public_delivery)
