"""Where a webhook may be delivered: by default only to public internet addresses, so that a
tenant cannot point a webhook at the deployment's own network (its database, a cloud metadata
endpoint) and read ports and status codes back from the delivery log."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit


def private_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone (fe80::1%eth0)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


async def refusal(url: str, *, allow_private: bool) -> str | None:
    """None when the URL may be delivered to; else the sentence the delivery log shows. A host
    that does not resolve is left to the HTTP client, whose error says so."""
    if allow_private:
        return None
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                            type=socket.SOCK_STREAM)
    except OSError:
        return None
    for *_, sockaddr in found:
        if private_address(sockaddr[0]):
            return (f"refused: {host} is {sockaddr[0]}, not a public address; set "
                    "TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=1 on the workers to deliver "
                    "inside your own network")
    return None
