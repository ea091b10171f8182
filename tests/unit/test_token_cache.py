"""The API's token cache: a token is kept at most its time to live and never past its expiry,
forgotten at once when this process revokes it (the clock is injected)."""

from __future__ import annotations

from uuid import uuid4

from tickwork.scheduler.tokens import Principal, TokenCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def principal() -> Principal:
    return Principal(tenant_id=uuid4(), is_admin=False, token_id=uuid4())


def test_a_token_is_served_until_its_second_is_over():
    clock = Clock()
    cache = TokenCache(1.0, clock=clock)
    kept = principal()
    cache.put(b"digest", kept, None)

    clock.now += 0.999
    within = cache.get(b"digest")
    clock.now += 0.001
    after = cache.get(b"digest")

    assert within is kept
    assert after is None


def test_a_token_that_expires_sooner_is_kept_only_until_its_expiry():
    clock = Clock()
    cache = TokenCache(1.0, clock=clock)
    cache.put(b"digest", principal(), 0.25)

    clock.now += 0.25

    assert cache.get(b"digest") is None


def test_an_expired_token_is_not_cached_at_all():
    cache = TokenCache(1.0, clock=Clock())
    cache.put(b"digest", principal(), 0.0)

    assert cache.get(b"digest") is None


def test_forget_drops_the_revoked_token_and_keeps_the_others():
    cache = TokenCache(1.0, clock=Clock())
    revoked, other = principal(), principal()
    cache.put(b"revoked", revoked, None)
    cache.put(b"other", other, None)

    cache.forget(revoked.token_id)

    assert cache.get(b"revoked") is None
    assert cache.get(b"other") is other


def test_a_full_cache_starts_over_instead_of_growing():
    cache = TokenCache(1.0, clock=Clock(), max_entries=2)
    for digest in (b"a", b"b", b"c"):
        cache.put(digest, principal(), None)

    assert cache.get(b"a") is None and cache.get(b"b") is None
    assert cache.get(b"c") is not None
