"""A webhook delivery goes to the address that was checked, over a real loopback connection
(issue 28, attack 6): the name is resolved once by the deliverer and never again by the HTTP
client. Only loopback is ever connected to: a transport in front of the real one refuses any
other address."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.integration.test_webhooks_delivery import add_hook, cancelled_run, deliveries
from tests.integration.webhook_receiver import Receiver
from tickwork.worker.webhooks.deliverer import Deliverer
from tickwork.worker.webhooks.pinned import PinnedTransport
from tickwork.worker.webhooks.settings import WebhookSettings

PUBLIC = "93.184.215.14"  # a global address the rebinding name answers first


class Rebinding:
    """Answers for one name: ``first`` at the first lookup, 127.0.0.1 at every later one."""

    def __init__(self, first: str) -> None:
        self.first, self.asked = first, 0

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked += 1
        return [self.first if self.asked == 1 else "127.0.0.1"]


class LoopbackOnly(httpx.AsyncBaseTransport):
    """The real transport, for loopback addresses only: any other address is recorded and
    refused here, before a connection is made."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        self._real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            loopback = ipaddress.ip_address(request.url.host).is_loopback
        except ValueError:  # a name: the real transport would resolve it (loopback below)
            loopback = True
        if not loopback:
            self.refused.append(request.url.host)
            raise httpx.ConnectError("this test connects to loopback only", request=request)
        return await self._real.handle_async_request(request)

    async def aclose(self) -> None:
        await self._real.aclose()


def named(receiver: Receiver, name: str) -> str:
    return receiver.url.replace("127.0.0.1", name)


async def test_a_rebinding_name_never_reaches_the_loopback_receiver(api, pool, monkeypatch):
    # The system resolver itself rebinds rebind.test, so any second lookup (the HTTP client's
    # own, as before) would get 127.0.0.1 and reach the receiver.
    resolve, system = Rebinding(PUBLIC), socket.getaddrinfo

    def rebinding_getaddrinfo(host, port, *args, **kwargs):
        if host not in ("rebind.test", b"rebind.test"):
            return system(host, port, *args, **kwargs)
        resolve.asked += 1
        address = PUBLIC if resolve.asked == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_getaddrinfo)
    with Receiver() as receiver:
        hook = await add_hook(api, named(receiver, "rebind.test"))
        await cancelled_run(api)
        inner = LoopbackOnly()
        transport = PinnedTransport(allow_private=False, inner=inner)  # the system resolver
        deliverer = Deliverer(pool, WebhookSettings(), http=httpx.AsyncClient(
            transport=transport, follow_redirects=False))
        try:
            [attempt] = await deliverer.deliver_once()
        finally:
            await deliverer.aclose()
        assert receiver.received == []
    # The address checked (public) is the one connected to; the name was looked up once.
    assert resolve.asked == 1 and inner.refused == [PUBLIC]
    assert not attempt.delivered
    [logged] = await deliveries(api, hook["id"])
    assert logged["last_error"] == "ConnectError: this test connects to loopback only"


async def test_a_name_is_delivered_to_the_address_it_resolved_to_with_the_name_as_host(api, pool):
    # hook.test resolves only through the deliverer's resolver: a second lookup by the HTTP
    # client would fail. Allowed private addresses, it reaches the loopback receiver.
    with Receiver() as receiver:
        await add_hook(api, named(receiver, "hook.test"))
        await cancelled_run(api)
        resolve = Rebinding("127.0.0.1")
        deliverer = Deliverer(pool, WebhookSettings(webhook_allow_private_addresses=True),
                              resolve=resolve)
        try:
            [attempt] = await deliverer.deliver_once()
        finally:
            await deliverer.aclose()
        [got] = receiver.received
    assert attempt.delivered and resolve.asked == 1
    port = receiver.server.server_address[1]
    assert got.headers["host"] == f"hook.test:{port}"


async def test_a_name_resolving_to_a_nat64_loopback_is_refused_unsent(api, pool):
    with Receiver() as receiver:
        hook = await add_hook(api, named(receiver, "nat64.test"))
        await cancelled_run(api)
        inner = LoopbackOnly()  # were it not refused, it would be stopped here, unsent
        transport = PinnedTransport(allow_private=False, resolve=Rebinding("64:ff9b::7f00:1"),
                                    inner=inner)
        deliverer = Deliverer(pool, WebhookSettings(), http=httpx.AsyncClient(
            transport=transport, follow_redirects=False))
        try:
            [attempt] = await deliverer.deliver_once()
        finally:
            await deliverer.aclose()
        assert receiver.received == []
    assert not attempt.delivered and attempt.status == "pending" and inner.refused == []
    [logged] = await deliveries(api, hook["id"])
    assert logged["last_error"].startswith("refused: nat64.test is 64:ff9b::7f00:1, not a "
                                           "public address")


def certificate(folder, name: str) -> tuple[str, str]:
    """A self-signed certificate for name (and its key), made by the openssl command."""
    cert, key = str(folder / f"{name}.pem"), str(folder / f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


class TlsReceiver:
    """An HTTPS server on a loopback port that answers 200 and records each Host header."""

    def __init__(self, cert: str, key: str) -> None:
        self.hosts: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.hosts.append(self.headers["host"])
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_https_to_the_pinned_address_checks_the_certificate_against_the_name(tmp_path):
    cert, key = certificate(tmp_path, "hook.test")
    receiver = TlsReceiver(cert, key)
    trusting = ssl.create_default_context(cafile=cert)
    try:
        for name, delivered in (("hook.test", True), ("other.test", False)):
            transport = PinnedTransport(allow_private=True, resolve=Rebinding("127.0.0.1"),
                                        inner=httpx.AsyncHTTPTransport(verify=trusting))
            async with httpx.AsyncClient(transport=transport) as http:
                url = f"https://{name}:{receiver.port}/hooks"
                if delivered:
                    assert (await http.post(url, content=b"{}")).status_code == 200
                else:  # a certificate for another name is refused, address or not
                    with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
                        await http.post(url, content=b"{}")
    finally:
        receiver.close()
    assert receiver.hosts == [f"hook.test:{receiver.port}"]
