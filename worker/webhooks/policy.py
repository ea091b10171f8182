"""What a delivery looks like on the wire and when it is tried again: the body, its signature
header, and the retry schedule. Pure functions, no I/O."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime, timezone
from typing import Any

from tickwork.sql.vocabulary import WebhookEvent

# Seconds to wait after the n-th failed attempt (n = 1, 2, ...): the first two retries come
# within a minute (10 s, then 30 s later), then the waits grow to six hours and stay there.
RETRY_DELAYS = (10, 30, 120, 300, 900, 1800, 3600, 7200, 14400, 21600)
# Retries go on until a failed attempt is at least this old, so a receiver that is down for
# up to a day still gets every event once it is back.
HORIZON_SECONDS = 24 * 3600


def retry_delay(attempts: int) -> int:
    """Seconds until the next attempt after ``attempts`` failed ones (1-based)."""
    return RETRY_DELAYS[min(max(attempts, 1), len(RETRY_DELAYS)) - 1]


def utc_text(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def delivery_body(delivery_id: Any, kind: WebhookEvent, created_at: datetime,
                  data: dict) -> bytes:
    """The POST body: the same bytes on every attempt of one delivery."""
    document = {"id": str(delivery_id), "type": kind, "created_at": utc_text(created_at),
                "data": data}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The Tickwork-Signature header: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">,
    keyed with the webhook's secret (the whole string, as shown when it was created)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def headers(delivery_id: Any, secret: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {"Content-Type": "application/json", "User-Agent": "tickwork-webhooks/1",
            "Tickwork-Delivery": str(delivery_id),
            "Tickwork-Signature": signature(secret, body, timestamp)}
