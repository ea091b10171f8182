"""A client guessing tokens is slowed down; nobody else is."""

import httpx
import pytest

from scheduler.api.app import create_app
from scheduler.api.throttle import AuthThrottle, TooManyFailures


def client(app, address: str, token: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://api.test",
                             headers={"Authorization": f"Bearer {token}"})


async def test_a_client_failing_too_often_gets_429_and_others_are_unaffected(pool, settings, tokens):
    settings.auth_failure_limit = 5
    app = create_app(settings, pool=pool)
    wrong = "tw_" + "A" * 43
    async with client(app, "10.0.0.9", wrong) as guesser, \
            client(app, "10.0.0.7", tokens["acme"]) as operator:
        answers = [(await guesser.get("/v1/agents")).status_code for _ in range(8)]
        assert answers == [401] * 5 + [429] * 3
        refused = await guesser.get("/v1/agents", headers={"Authorization": f"Bearer {tokens['acme']}"})
        assert refused.status_code == 429 and "try again" in refused.json()["message"]
        assert (await operator.get("/v1/agents")).status_code == 200


def test_failures_older_than_the_window_no_longer_count():
    now = [0.0]
    throttle = AuthThrottle(limit=2, window_seconds=10, clock=lambda: now[0])
    throttle.failed("a")
    throttle.failed("a")
    with pytest.raises(TooManyFailures):
        throttle.check("a")
    throttle.check("b")  # another address is not affected
    now[0] = 10.5
    throttle.check("a")  # the window has passed
