"""Webhook deliveries connect to the address that was checked (issue 28, attack 6): the host is
resolved once, every answer is checked, and the request goes to that address with the name as
Host (and SNI); IPv6 forms that carry an IPv4 address are judged by it. No traffic leaves this
process: the transport under test hands its requests to a recording transport."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tickwork.worker.webhooks.address_guard import (AddressRefused, checked_address,
                                                    private_address)
from tickwork.worker.webhooks.pinned import PinnedTransport

PUBLIC = "93.184.215.14"  # a global address: resolved to, never connected to


class Rebinding:
    """A resolver whose name answers a public address first and 127.0.0.1 afterwards."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers, self.asked = list(answers), []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.answers[min(len(self.asked), len(self.answers)) - 1]


class Recorder(httpx.AsyncBaseTransport):
    """Where the transport under test would connect, and with what; answers 204, sends nothing."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(204)


def client(resolve, *, allow_private: bool = False) -> tuple[httpx.AsyncClient, Recorder]:
    recorder = Recorder()
    transport = PinnedTransport(allow_private=allow_private, resolve=resolve, inner=recorder)
    return httpx.AsyncClient(transport=transport, follow_redirects=False), recorder


EMBEDDING_PRIVATE = [
    "::ffff:127.0.0.1", "::ffff:10.0.0.1",           # IPv4-mapped
    "::127.0.0.1", "::10.0.0.1", "::169.254.169.254",  # IPv4-compatible (::/96)
    "64:ff9b::127.0.0.1", "64:ff9b::a00:1", "64:ff9b::169.254.169.254",  # NAT64
    "64:ff9b:1::a00:1", "64:ff9b:1::808:808",         # local-use NAT64: the operator's own
    "2002:7f00:1::1", "2002:a00:1::", "2002:a9fe:a9fe::1",  # 6to4
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",            # Teredo (client 192.0.2.45)
    "2001:0:a00:1::1",                                 # Teredo, server 10.0.0.1
]


@pytest.mark.parametrize("address", EMBEDDING_PRIVATE)
def test_an_ipv6_address_carrying_a_private_ipv4_address_is_private(address):
    assert private_address(address)


def test_ipv6_forms_carrying_a_public_ipv4_address_stay_public():
    for address in ("::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
                    "2606:4700:4700::1111"):
        assert not private_address(address), address


@pytest.mark.parametrize("address", EMBEDDING_PRIVATE)
async def test_each_ipv6_form_is_refused_before_anything_connects(address):
    http, recorder = client(Rebinding([address]))
    with pytest.raises(AddressRefused, match=f"is {address}, not a public address"):
        await http.post("https://hooks.example.com/in", content=b"{}")
    literal, recorder_literal = client(Rebinding([PUBLIC]))
    with pytest.raises(AddressRefused, match=f"refused: {address} is not a public address"):
        await literal.post(f"http://[{address}]:8080/in", content=b"{}")
    assert recorder.requests == [] and recorder_literal.requests == []


async def test_a_rebinding_name_is_resolved_once_and_its_checked_address_is_the_one_used():
    resolve = Rebinding([PUBLIC], ["127.0.0.1"])
    http, recorder = client(resolve)
    response = await http.post("https://hooks.example.com:8443/in", content=b"{}")
    assert response.status_code == 204
    [sent] = recorder.requests
    assert resolve.asked == [("hooks.example.com", 8443)]  # no second answer to be rebound by
    assert (sent.url.host, sent.url.port) == (PUBLIC, 8443)
    assert sent.headers["host"] == "hooks.example.com:8443"
    assert sent.extensions["sni_hostname"] == "hooks.example.com"  # the certificate's name


async def test_a_name_answering_one_private_address_among_public_ones_is_refused():
    http, recorder = client(Rebinding([PUBLIC, "127.0.0.1"]))
    with pytest.raises(AddressRefused, match="hooks.example.com is 127.0.0.1"):
        await http.post("https://hooks.example.com/in", content=b"{}")
    assert recorder.requests == []


async def test_private_addresses_may_be_allowed_and_still_connect_to_the_one_resolved():
    resolve = Rebinding(["10.0.0.7"], ["127.0.0.1"])
    http, recorder = client(resolve, allow_private=True)
    await http.post("http://hooks.internal/in", content=b"{}")
    [sent] = recorder.requests
    assert sent.url.host == "10.0.0.7" and sent.headers["host"] == "hooks.internal"
    assert "sni_hostname" not in sent.extensions and len(resolve.asked) == 1


async def test_a_name_that_resolves_to_nothing_is_a_connect_error_that_says_so():
    async def nowhere(host, port):
        raise OSError("Name or service not known")

    http, recorder = client(nowhere)
    with pytest.raises(httpx.ConnectError, match="hooks.example.com does not resolve"):
        await http.post("https://hooks.example.com/in", content=b"{}")
    with pytest.raises(AddressRefused):
        await checked_address("localhost", 80, allow_private=False,
                              resolve=Rebinding(["::1"]))
    assert recorder.requests == []


async def test_a_resolver_that_hangs_is_a_connect_timeout_within_the_connect_timeout():
    hung = asyncio.Event()

    async def hangs(host, port):
        await hung.wait()  # never set: a resolver that never answers
        return [PUBLIC]

    recorder = Recorder()
    transport = PinnedTransport(allow_private=False, resolve=hangs, inner=recorder)
    async with httpx.AsyncClient(transport=transport, timeout=0.05) as http:
        with pytest.raises(httpx.ConnectTimeout, match="resolving hooks.example.com took longer "
                                                       "than 0.05 s"):
            await http.post("https://hooks.example.com/in", content=b"{}")
    assert recorder.requests == []
