"""The webhook deliverer's HTTP transport: it connects to the address the guard checked.

Checking an address and then letting the HTTP client resolve the name again gave a rebinding
name a second answer (127.0.0.1) after the first (public) one passed the check. So the host is
resolved once (worker/webhooks/address_guard.py), and the request is sent to that address with
the name kept where the receiver reads it: the Host header (set from the URL before this
transport sees the request) and, over TLS, the SNI and the certificate check.

No connection is kept alive: the pool keys connections by address, so a kept connection opened
(and its certificate checked) for one name could otherwise carry another name's delivery.
"""

from __future__ import annotations

import asyncio

import httpx

from tickwork.worker.webhooks.address_guard import Resolve, checked_address, system_resolve

DEFAULT_PORTS = {"http": 80, "https": 443}


class PinnedTransport(httpx.AsyncBaseTransport):
    """Sends each request to the checked address of its host through ``inner`` (by default
    httpx's own transport). AddressRefused and a failed resolution propagate unsent."""

    def __init__(self, *, allow_private: bool, resolve: Resolve = system_resolve,
                 inner: httpx.AsyncBaseTransport | None = None, max_connections: int = 10) -> None:
        self._allow_private, self._resolve = allow_private, resolve
        self._inner = inner or httpx.AsyncHTTPTransport(limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        port = request.url.port or DEFAULT_PORTS.get(request.url.scheme, 80)
        # Resolving is part of connecting: a slow resolver holds the delivery no longer.
        connect_timeout = (request.extensions.get("timeout") or {}).get("connect")
        try:
            async with asyncio.timeout(connect_timeout):
                address = await checked_address(host, port, allow_private=self._allow_private,
                                                resolve=self._resolve)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"resolving {host} took longer than {connect_timeout:g} s",
                                       request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"{host} does not resolve ({exc})", request=request) from None
        if address != host:
            request.url = request.url.copy_with(host=address)
            if request.url.scheme == "https":  # the name, not the address, for SNI and the cert
                request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
