"""A per-tenant request rate: each tenant's authenticated requests draw from a token bucket
(TICKWORK_TENANT_RATE_LIMIT requests a second, bursts of TICKWORK_TENANT_RATE_BURST); a tenant
past it gets 429 with Retry-After, and no other tenant notices. Per API process and in memory,
like the failed-token brake (scheduler/api/throttle.py): behind N API processes a tenant may
make N times the rate. Operator tokens are not limited."""

from __future__ import annotations

import math
import time
from typing import Callable
from uuid import UUID

from tickwork.sql.errors import TickworkError

# Tenants remembered at once; the least recently seen is forgotten first (a forgotten tenant
# starts with a full bucket, which a burst allows anyway).
MAX_TENANTS = 100_000


class TenantRateLimited(TickworkError):
    code = "rate_limited"


class TenantRateLimit:
    """``rate`` requests a second per tenant, ``burst`` at once; a rate of 0 turns it off.
    ``clock`` is a monotonic clock in seconds, injected so tests can drive it."""

    def __init__(self, *, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._burst, self._clock = rate, max(1, burst), clock
        self._buckets: dict[UUID, tuple[float, float]] = {}  # tenant -> (tokens, when)

    def charge(self, tenant_id: UUID) -> None:
        """Take one request from the tenant's bucket, or raise TenantRateLimited saying when
        the next one will be allowed."""
        if self._rate <= 0:
            return
        now = self._clock()
        tokens, when = self._buckets.pop(tenant_id, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - when) * self._rate)
        if tokens < 1:
            self._buckets[tenant_id] = (tokens, now)
            wait = max(1, math.ceil((1 - tokens) / self._rate))
            raise TenantRateLimited(
                f"this tenant is over its request rate ({self._rate:g} requests a second, "
                f"bursts of {self._burst}); try again in {wait} seconds", retry_after=wait)
        self._buckets[tenant_id] = (tokens - 1, now)  # re-inserted: most recently seen last
        if len(self._buckets) > MAX_TENANTS:
            self._buckets.pop(next(iter(self._buckets)))
