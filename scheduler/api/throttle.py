"""A brake on token guessing: an address that fails authentication too often in a short window
gets 429 instead of 401 for its next failures, for a while. Only failures count, and the token
is always looked at first, so a valid token is never refused because someone else behind the
same address guessed badly: the brake only makes guessing slow and noisy (with tokens of 256
random bits that is all it needs to do). Per API process and in memory.

The address is the peer's, unless the peer is a proxy the operator trusts
(TICKWORK_TRUSTED_PROXIES): only then is X-Forwarded-For read, so a client cannot rotate the
header to dodge the brake or write a victim's address into it to lock the victim out."""

from __future__ import annotations

import ipaddress
import time
from collections import deque
from typing import Iterable

# The proxies setting is parsed where settings are (scheduler/settings.py: a typo is refused at startup).
from tickwork.scheduler.settings import Network
from tickwork.sql.errors import TickworkError

__all__ = ["AuthThrottle", "TooManyFailures", "client_address"]


class TooManyFailures(TickworkError):
    code = "too_many_failed_logins"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(address, proxies: Iterable[Network]) -> bool:
    return address is not None and any(address in network for network in proxies)


def client_address(peer: str, forwarded_for: str | None, proxies: tuple[Network, ...]) -> str:
    """The address the brake counts against. X-Forwarded-For is read only when the peer is a
    trusted proxy, and then right to left: the first entry that is not itself a trusted proxy
    is the client (entries further left were written by whoever the client is, so are not
    believed)."""
    if not proxies or not forwarded_for or not _trusted(_address(peer), proxies):
        return peer
    for entry in reversed(forwarded_for.split(",")):
        address = _address(entry)
        if address is None:
            return peer  # a garbled header from a trusted proxy: fall back to what we know
        if not _trusted(address, proxies):
            return str(address)
    return peer


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
                                  f"in {wait} seconds", retry_after=wait)

    def failed(self, client: str) -> None:
        self._recent(client).append(self._clock())
        if len(self._failures) > 10_000:  # bounded memory under a spray of addresses
            self._failures.pop(next(iter(self._failures)))

    def _recent(self, client: str) -> deque[float]:
        recent = self._failures.setdefault(client, deque())
        while recent and self._clock() - recent[0] > self._window:
            recent.popleft()
        return recent
