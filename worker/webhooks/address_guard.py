"""Where a webhook may be delivered: by default only to public internet addresses, so that a
tenant cannot point a webhook at the deployment's own network (its database, a cloud metadata
endpoint) and read ports and status codes back from the delivery log.

The host is resolved once, every address it resolved to is checked, and the delivery connects
to a checked address (worker/webhooks/pinned.py): a name that resolves to a public address for
the check and to 127.0.0.1 a moment later (DNS rebinding) never reaches 127.0.0.1.

IPv6 addresses that carry an IPv4 address (IPv4-mapped and -compatible, NAT64, 6to4, Teredo)
reach that IPv4 address, so they are judged by it: 64:ff9b::127.0.0.1 is loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Awaitable, Callable

# host, port -> the addresses it resolves to, in the resolver's order.
Resolve = Callable[[str, int], Awaitable[list[str]]]

# The IPv4 address is the last 32 bits: IPv4-compatible (::a.b.c.d, RFC 4291) and the
# well-known NAT64 prefix (RFC 6052).
_LOW_32_BITS = (ipaddress.IPv6Network("::/96"), ipaddress.IPv6Network("64:ff9b::/96"))
# Local-use NAT64 (RFC 8215) translates inside the operator's own network, whatever it embeds.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


class AddressRefused(Exception):
    """The host is, or resolves to, an address deliveries may not go to; the message is the
    sentence the delivery log shows."""


def _private_v4(ip: ipaddress.IPv4Address) -> bool:
    return not ip.is_global or ip.is_multicast


def private_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone (fe80::1%eth0)
    if isinstance(ip, ipaddress.IPv4Address):
        return _private_v4(ip)
    if ip.ipv4_mapped is not None:
        return _private_v4(ip.ipv4_mapped)
    if any(ip in network for network in _LOW_32_BITS):
        return _private_v4(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip in _LOCAL_NAT64:
        return True
    embedded = [ip.sixtofour] if ip.sixtofour is not None else list(ip.teredo or ())
    if any(_private_v4(v4) for v4 in embedded):
        return True
    return not ip.is_global or ip.is_multicast


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for host, in its order."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [sockaddr[0] for *_, sockaddr in found]


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


async def checked_address(host: str, port: int, *, allow_private: bool,
                          resolve: Resolve = system_resolve) -> str:
    """The one address to connect to for host: an address literal as it is, else host
    resolved once. Unless allow_private, every address it resolved to must be public (one
    private answer among public ones is how a rebinding name hedges), else AddressRefused.
    A host that does not resolve raises OSError."""
    addresses = [host] if _literal(host) else await resolve(host, port)
    if not addresses:
        raise OSError(f"{host} resolved to no address")
    for address in addresses:
        if not allow_private and private_address(address):
            what = f"{host} is {address}," if address != host else f"{host} is"
            raise AddressRefused(
                f"refused: {what} not a public address; set "
                "TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=1 on the workers to deliver inside "
                "your own network")
    return addresses[0]
