"""The webhook deliverer: a loop inside the worker process that claims due deliveries from
webhook_deliveries and POSTs each one, signed, outside any transaction and off the runs' path.

Deliveries run as their own asyncio tasks (at most ``webhook_concurrency`` at once) with a
short HTTP timeout, on the deliverer's own small pool: a receiver that is slow or down holds
one delivery slot for at most the timeout and never a run, a run's connection or a transaction.
LISTEN on tickwork_webhooks shortens the wait; polling is the truth (as in worker/runner.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import httpx
import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.db import DatabaseSettings, listen_forever
from tickwork.worker.webhooks.address_guard import AddressRefused, Resolve, system_resolve
from tickwork.worker.webhooks.pinned import PinnedTransport
from tickwork.worker.webhooks.policy import HORIZON_SECONDS, delivery_body, headers, retry_delay
from tickwork.worker.webhooks.settings import WebhookSettings

log = structlog.get_logger()
# A claimed delivery is not claimed again for this long (longer than any attempt can take).
LEASE_MARGIN_SECONDS = 30
PRUNE_EVERY_SECONDS = 600


@dataclass(frozen=True)
class Attempt:
    delivery_id: str
    attempt: int
    status_code: int | None
    error: str | None
    delivered: bool
    status: str | None  # the row's status after it was recorded (None: fenced off)


class Deliverer:
    """Claims and sends deliveries; ``deliver_once`` is one batch (tests drive it with an
    injected ``now``), ``run`` is the loop of the worker process."""

    def __init__(self, pool: AsyncConnectionPool, settings: WebhookSettings, *,
                 database_url: str | None = None, http: httpx.AsyncClient | None = None,
                 clock: Callable[[], float] = time.time,
                 resolve: Resolve = system_resolve) -> None:
        self._pool, self._settings, self._url, self._clock = pool, settings, database_url, clock
        # The transport connects to the address it checked (worker/webhooks/pinned.py); a
        # client passed in is used as it is.
        self._http = http or httpx.AsyncClient(
            timeout=settings.webhook_timeout_seconds, follow_redirects=False,
            transport=PinnedTransport(
                allow_private=settings.webhook_allow_private_addresses, resolve=resolve,
                max_connections=settings.webhook_concurrency))
        self._wake = asyncio.Event()
        self._active: set[asyncio.Task] = set()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def deliver_once(self, *, now: datetime | None = None,
                           limit: int | None = None) -> list[Attempt]:
        """Claim what is due (as of ``now``, the database's clock when None), send it all
        concurrently, record each outcome, and return the attempts."""
        rows = await self._claim(now, limit or self._settings.webhook_concurrency)
        return list(await asyncio.gather(*(self._attempt(row, now) for row in rows)))

    async def _claim(self, now: datetime | None, limit: int) -> list[dict[str, Any]]:
        lease = self._settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS
        async with self._pool.connection() as conn:
            cursor = await conn.execute(QUERIES["claim_webhook_deliveries"], {
                "now": now, "limit": limit, "lease_seconds": lease})
            return await cursor.fetchall()

    async def _attempt(self, row: dict[str, Any], now: datetime | None) -> Attempt:
        body = delivery_body(row["id"], row["type"], row["created_at"], row["data"])
        sent_at = int(now.timestamp()) if now is not None else int(self._clock())
        code, error = await self._post(row["url"], body,
                                       headers(row["id"], row["secret"], body, sent_at))
        delivered = code is not None and 200 <= code < 300
        async with self._pool.connection() as conn:
            recorded = await (await conn.execute(QUERIES["update_webhook_delivery_attempt"], {
                "id": row["id"], "attempt": row["attempts"], "delivered": delivered,
                "now": now, "horizon_seconds": HORIZON_SECONDS,
                "retry_seconds": retry_delay(row["attempts"]), "status_code": code,
                "error": error})).fetchone()
        result = Attempt(str(row["id"]), row["attempts"], code, error, delivered,
                         recorded["status"] if recorded else None)
        log.info("webhook_attempt", delivery_id=result.delivery_id, type=row["type"],
                 attempt=result.attempt, status_code=code, error=error, status=result.status)
        return result

    async def _post(self, url: str, body: bytes, sent_headers: dict[str, str]
                    ) -> tuple[int | None, str | None]:
        """(status code, error sentence); the response body is never read. Redirects are not
        followed (a 3xx is a failed attempt), so the address checked is the one posted to."""
        try:
            async with self._http.stream("POST", url, content=body,
                                         headers=sent_headers) as response:
                code = response.status_code
        except AddressRefused as exc:
            return None, str(exc)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
        return code, None if 200 <= code < 300 else f"the receiver answered HTTP {code}"

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop``; deliveries in flight get their timeout to finish."""
        listener = asyncio.create_task(listen_forever(
            self._url, QUERIES["listen_for_webhooks"], application_name="tickwork-webhooks-listen",
            wake=self._wake, stop=stop, lost_event="webhook_listener_lost")) if self._url else None
        pruned_at = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() - pruned_at > PRUNE_EVERY_SECONDS:
                    pruned_at = time.monotonic()
                    await self._prune()
                if not await self._fill_slots():
                    await self._idle(stop)
        finally:
            if listener is not None:
                listener.cancel()
            if self._active:
                await asyncio.wait(set(self._active),
                                   timeout=self._settings.webhook_timeout_seconds + 1)

    async def _fill_slots(self) -> bool:
        free = self._settings.webhook_concurrency - len(self._active)
        if free <= 0:
            return False
        try:
            rows = await self._claim(None, free)
        except psycopg.Error as exc:  # Postgres away: the next poll tries again
            log.warning("webhook_claim_failed", error=type(exc).__name__)
            return False
        for row in rows:
            self._active.add(asyncio.create_task(self._guarded(row)))
        return len(rows) == free

    async def _guarded(self, row: dict[str, Any]) -> None:
        try:
            await self._attempt(row, None)
        except Exception as exc:  # unrecorded: the row is due again when its lease runs out
            log.error("webhook_attempt_failed", delivery_id=str(row["id"]),
                      error=type(exc).__name__)
        finally:
            self._active.discard(asyncio.current_task())
            self._wake.set()

    async def _idle(self, stop: asyncio.Event) -> None:
        self._wake.clear()
        waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(self._wake.wait())]
        await asyncio.wait(waiters, timeout=self._settings.webhook_poll_seconds,
                           return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    async def _prune(self) -> None:
        try:
            async with self._pool.connection() as conn:
                await conn.execute(QUERIES["delete_old_webhook_deliveries"], {
                    "now": None, "keep_days": self._settings.webhook_keep_days, "limit": 1000})
        except psycopg.Error as exc:
            log.warning("webhook_prune_failed", error=type(exc).__name__)


async def serve_deliverer(url: str, settings: WebhookSettings, stop: asyncio.Event) -> None:
    """The worker process's deliverer, on its own small pool, until ``stop``."""
    from tickwork.sql.db import open_pool

    pool = await open_pool(url, application_name="tickwork-webhooks", max_size=2, check=False)
    deliverer = Deliverer(pool, settings, database_url=DatabaseSettings().listen_url(url))
    try:
        await deliverer.run(stop)
    finally:
        await deliverer.aclose()
        await pool.close()
