"""Which addresses a URL taken from a request may reach.

A server that fetches URLs its clients name (an MCP `server_url`) must not become a way into the
networks behind it. Public (globally routable) addresses are open; loopback, private, link-local,
shared and reserved ones only for the hosts or networks run.yaml lists.

The check is made twice: when the request arrives (`AddressPolicy.check_url`, a clear 400), and
again by the HTTP transport each time it opens a connection (`AddressPolicy.allows`, called with
the address actually about to be dialled), so that neither a DNS answer that changes between the
two (rebinding) nor a redirect can lead elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import SplitResult, urlsplit

from contract.errors import InvalidRequestError

__all__ = ["AddressPolicy", "is_public"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


async def _resolve(host: str, parts: SplitResult, param: str) -> list[str]:
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as error:
        raise InvalidRequestError(f"Invalid '{param}': cannot resolve the host {host!r} ({error}).", param=param,
                                  code="invalid_value") from None
    return [str(info[4][0]) for info in infos]


def is_public(address: IPAddress) -> bool:
    """Globally routable (an IPv4-mapped IPv6 address is judged by its IPv4 address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


class AddressPolicy:
    """Public addresses, plus the non-public hosts and networks of `allow` (host names, IP
    addresses, CIDR networks such as `10.0.0.0/8`)."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self.hosts: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in allow:
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.hosts.add(entry.lower().rstrip("."))

    def allows(self, host: str, address: str) -> bool:
        """Whether a connection to `host` may be made at `address`."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if is_public(ip):
            return True
        if host.lower().rstrip(".") in self.hosts:
            return True
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self.networks)

    async def check_url(self, url: str, param: str) -> None:
        """A 400 naming `param` unless `url` is http(s) and its host resolves to an allowed address."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequestError(f"Invalid '{param}': expected an http or https URL.", param=param, code="invalid_value")
        host = parts.hostname
        try:
            addresses = [str(ipaddress.ip_address(host))]  # a literal address: nothing to resolve
        except ValueError:
            addresses = await _resolve(host, parts, param)
        if not any(self.allows(host, address) for address in addresses):
            raise InvalidRequestError(
                f"Invalid '{param}': {host!r} is a private or reserved address ({addresses[0]}), which this server does not "
                "let requests reach. An operator can allow it in run.yaml (the tool provider's allow_private list), or "
                "configure the server there and let requests name it by server_label.",
                param=param, code="invalid_value",
            )
