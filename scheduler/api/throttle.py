"""A brake on token guessing: a client that fails authentication too often in a short window
is refused with 429 for a while, before its token is even looked at. Other clients, and
correct tokens from other addresses, are unaffected. Per API process and in memory: with
tokens of 256 random bits this only needs to make guessing noisy, not impossible."""

from __future__ import annotations

import time
from collections import deque

from sql.errors import TickworkError


class TooManyFailures(TickworkError):
    code = "too_many_failed_logins"
    http_status = 429


class AuthThrottle:
    def __init__(self, *, limit: int, window_seconds: float,
                 clock=time.monotonic) -> None:
        self._limit, self._window, self._clock = limit, window_seconds, clock
        self._failures: dict[str, deque[float]] = {}

    def check(self, client: str) -> None:
        """Raise TooManyFailures while ``client`` is over the limit."""
        recent = self._recent(client)
        if self._limit and len(recent) >= self._limit:
            wait = int(self._window - (self._clock() - recent[0])) + 1
            raise TooManyFailures(f"too many failed token attempts from this address; try again "
                                  f"in {wait} seconds")

    def failed(self, client: str) -> None:
        self._recent(client).append(self._clock())
        if len(self._failures) > 10_000:  # bounded memory under a spray of addresses
            self._failures.pop(next(iter(self._failures)))

    def _recent(self, client: str) -> deque[float]:
        recent = self._failures.setdefault(client, deque())
        while recent and self._clock() - recent[0] > self._window:
            recent.popleft()
        return recent
