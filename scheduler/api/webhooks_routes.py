"""/v1/webhooks: a tenant's receivers of signed event POSTs, and each one's delivery log."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Depends

from tickwork.scheduler.api.deps import Session, session
from tickwork.scheduler.pagination import check_limit
from tickwork.scheduler.webhooks import (WebhookIn, create_webhook, delete_webhook, list_deliveries,
                                list_webhooks)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


@router.post("", status_code=201)
async def create(body: WebhookIn, s: Session = Depends(session)) -> dict:
    """Add a webhook: {"url", "events"} -> {"id", "url", "events", "secret", "created_at"}.
    The secret signs every delivery (Tickwork-Signature) and is shown here only."""
    return await create_webhook(s.conn, s.principal.tenant_id, body)


@router.get("")
async def list_(limit: int = 50, cursor: str | None = None,
                s: Session = Depends(session)) -> dict:
    """The tenant's webhooks, oldest first (never their secrets)."""
    return await list_webhooks(s.conn, s.principal.tenant_id, limit=check_limit(limit),
                               cursor=cursor)


@router.delete("/{webhook_id}", status_code=204)
async def remove(webhook_id: UUID, s: Session = Depends(session)) -> None:
    """Remove a webhook; its pending deliveries are dropped with it."""
    await delete_webhook(s.conn, s.principal.tenant_id, webhook_id)


@router.get("/{webhook_id}/deliveries")
async def deliveries(webhook_id: UUID, limit: int = 50, cursor: str | None = None,
                     s: Session = Depends(session)) -> dict:
    """The delivery log, newest first: type, status (pending, delivered, failed), attempts,
    the last HTTP status code or error, the next attempt, and the event's data."""
    return await list_deliveries(s.conn, s.principal.tenant_id, webhook_id,
                                 limit=check_limit(limit), cursor=cursor)
