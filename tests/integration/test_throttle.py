"""A client guessing tokens is slowed down; nobody else is, and no header can fool the brake.

Addresses are documentation ranges handed to the in-process ASGI transport as the peer: no
packet goes anywhere."""

import httpx
import pydantic
import pytest

from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.api.throttle import AuthThrottle, TooManyFailures, client_address
from tickwork.scheduler.settings import parse_networks
from tickwork.scheduler.settings import SchedulerSettings

WRONG = "tw_" + "A" * 43


def client(app, address: str, token: str, forwarded_for: str | None = None) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    headers = {"Authorization": f"Bearer {token}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return httpx.AsyncClient(transport=transport, base_url="http://api.test", headers=headers)


@pytest.fixture
def braked(pool, settings):
    settings.auth_failure_limit = 5
    return create_app(settings, pool=pool)


async def test_a_client_failing_too_often_gets_429_and_others_are_unaffected(braked, tokens):
    async with client(braked, "192.0.2.9", WRONG) as guesser, \
            client(braked, "192.0.2.7", tokens["acme"]) as operator, \
            client(braked, "192.0.2.8", WRONG) as typo:
        answers = [(await guesser.get("/v1/agents")).status_code for _ in range(8)]
        assert answers == [401] * 5 + [429] * 3
        refused = await guesser.get("/v1/agents")
        assert refused.status_code == 429 and "try again" in refused.json()["message"]
        assert (await operator.get("/v1/agents")).status_code == 200
        assert (await typo.get("/v1/agents")).status_code == 401  # its own count is 1


async def test_a_valid_token_from_a_throttled_address_still_works(braked, tokens):
    async with client(braked, "192.0.2.9", WRONG) as guesser:
        assert [(await guesser.get("/v1/agents")).status_code for _ in range(6)][-1] == 429
        valid = await guesser.get("/v1/agents", headers={"Authorization":
                                                         f"Bearer {tokens['acme']}"})
        assert valid.status_code == 200, valid.text
        assert (await guesser.get("/v1/agents")).status_code == 429  # the brake is still on


async def test_rotating_x_forwarded_for_from_an_untrusted_peer_does_not_evade_the_brake(braked):
    async with client(braked, "192.0.2.9", WRONG) as guesser:
        answers = [(await guesser.get("/v1/agents",
                                      headers={"X-Forwarded-For": f"203.0.113.{i}"})).status_code
                   for i in range(8)]
    assert answers == [401] * 5 + [429] * 3


async def test_a_spoofed_x_forwarded_for_cannot_lock_out_another_address(braked, tokens):
    async with client(braked, "192.0.2.9", WRONG, forwarded_for="192.0.2.7") as attacker, \
            client(braked, "192.0.2.7", WRONG) as victim_typo:
        assert [(await attacker.get("/v1/agents")).status_code for _ in range(8)][-1] == 429
        # The victim's own address has no failures: a mistyped token is a plain 401.
        assert (await victim_typo.get("/v1/agents")).status_code == 401
        valid = await victim_typo.get("/v1/agents", headers={"Authorization":
                                                             f"Bearer {tokens['acme']}"})
        assert valid.status_code == 200


async def test_behind_a_trusted_proxy_the_forwarded_address_is_the_one_counted(pool, settings):
    settings.auth_failure_limit = 5
    settings.trusted_proxies = "192.0.2.1, 198.51.100.0/24"
    app = create_app(settings, pool=pool)
    async with client(app, "192.0.2.1", WRONG, forwarded_for="203.0.113.5") as one, \
            client(app, "192.0.2.1", WRONG, forwarded_for="203.0.113.6") as other, \
            client(app, "192.0.2.1", WRONG,
                   forwarded_for="203.0.113.6, 203.0.113.5, 198.51.100.4") as chained:
        assert [(await one.get("/v1/agents")).status_code for _ in range(6)] == [401] * 5 + [429]
        # Another client behind the same proxy is not braked by the first one's failures.
        assert (await other.get("/v1/agents")).status_code == 401
        # Through two trusted proxies, the client is the rightmost untrusted entry (203.0.113.5);
        # what it wrote further left (203.0.113.6) is not believed.
        assert (await chained.get("/v1/agents")).status_code == 429


async def test_requests_without_a_token_are_not_counted_as_guesses(braked):
    async with client(braked, "192.0.2.9", WRONG) as browser:
        bare = [(await browser.get("/v1/agents", headers={"Authorization": ""})).status_code
                for _ in range(10)]
        assert bare == [401] * 10
        assert (await browser.get("/v1/agents")).status_code == 401  # first real failure


def test_client_address_reads_the_header_only_from_trusted_proxies():
    proxies = parse_networks("10.1.0.0/16,::1")
    assert client_address("192.0.2.9", "203.0.113.1", proxies) == "192.0.2.9"
    assert client_address("10.1.2.3", "203.0.113.1", proxies) == "203.0.113.1"
    assert client_address("::1", "203.0.113.1, 10.1.9.9", proxies) == "203.0.113.1"
    assert client_address("10.1.2.3", "garbage", proxies) == "10.1.2.3"
    assert client_address("10.1.2.3", None, proxies) == "10.1.2.3"
    assert client_address("10.1.2.3", "203.0.113.1", ()) == "10.1.2.3"


def test_a_trusted_proxy_setting_that_is_not_an_address_is_refused_with_a_sentence():
    with pytest.raises(pydantic.ValidationError, match="'nope' is not an IP address or CIDR"):
        SchedulerSettings(trusted_proxies="10.0.0.1, nope")
    assert SchedulerSettings().trusted_proxies == ""  # empty by default: no header believed


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


async def test_the_served_api_believes_no_forwarded_header_from_a_local_peer(pool, settings):
    """Served as `tickwork api` serves it (tickwork.processes.api_server_config): a client on
    the same host rotating X-Forwarded-For is still one address to the brake."""
    import asyncio
    import socket

    import uvicorn

    from tickwork.processes import api_server_config

    settings.auth_failure_limit = 5
    app = create_app(settings, pool=pool)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(api_server_config(app, "127.0.0.1", port))
    server.install_signal_handlers = lambda: None
    served = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            answers = [(await http.get("/v1/agents", headers={
                "Authorization": f"Bearer {WRONG}",
                "X-Forwarded-For": f"198.51.100.{n}"})).status_code for n in range(8)]
    finally:
        server.should_exit = True
        await served
    assert answers == [401] * 5 + [429] * 3
