"""A sandbox's one way out: an HTTP proxy on the host, listening on a Unix socket of its own.

A sandbox whose container allows domains still has no network interface but its own loopback; the
kernel driver forwards 127.0.0.1:<port> inside to this socket (bound into the sandbox), and the
code's HTTP_PROXY and HTTPS_PROXY name that port. Here, on the host, each request is judged before
anything is dialled: `CONNECT host:port` (HTTPS, any TLS: the proxy sees no content) or a plain-HTTP
request with an absolute URI. The host and port must be allowed by both the operator's rules and the
container's domains (`contract.sandboxes.network.allows`); the proxy resolves the name itself and
dials only an address the guard allows (public ones: never the host's loopback, a private network,
a link-local metadata service), so what the code asked for is what is reached, with no DNS of the
sandbox's to trust. Connecting has a time limit, an idle tunnel is closed, and a sandbox has at most
`max_tunnels` connections at once. A refusal is an HTTP answer saying why (403, 502, 503, 504).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import shutil
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from contract.sandboxes.network import HostRule, allows
from contract.spec import AddressGuard

__all__ = ["EgressProxy", "Refusal", "Target", "parse_request"]

log = logging.getLogger("stack")

MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_S = 30.0
_HOP_HEADERS = ("proxy-", "connection:", "keep-alive:")


class Refusal(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    request: bytes | None
    """What to send upstream first: a plain-HTTP request rewritten to origin form; None for a CONNECT tunnel."""


def _host_port(authority: str) -> tuple[str, int]:
    host, colon, port = authority.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise Refusal(400, f"CONNECT needs host:port, not {authority[:100]!r}")
    return host.strip("[]"), int(port)


def parse_request(head: bytes) -> Target:
    """The request head (through its blank line): where it goes, and what to send there."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refusal(400, "not an HTTP/1 request")
    method, target, version = parts
    if method == "CONNECT":
        return Target(*_host_port(target), None)
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise Refusal(400, "a request through this proxy names an absolute http:// URI (https:// goes by CONNECT)")
    try:
        port = url.port or 80
    except ValueError:
        raise Refusal(400, "the URI's port is not a number from 1 to 65535") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    # Hop-by-hop headers are the proxy's; one request per connection keeps the framing trivially right. The
    # Host is the judged one: another would let a server that routes by it (a CDN) serve a host not allowed.
    headers = [line for line in lines[1:] if line and not line.lower().startswith((*_HOP_HEADERS, "host:"))]
    headers.insert(0, f"Host: {url.netloc.rpartition('@')[2]}")
    request = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
    return Target(url.hostname, port, request.encode("latin-1"))


class EgressProxy:
    """One sandbox's proxy: `open` it (a socket in a new private directory), `close` it with its kernel."""

    def __init__(self, directory: Path, operator: Sequence[HostRule], domains: Sequence[HostRule], guard: AddressGuard, *,
                 connect_timeout_s: float = 10.0, idle_timeout_s: float = 300.0, max_tunnels: int = 32) -> None:
        self.directory = directory
        self.socket_path = directory / "egress.sock"
        self.operator = tuple(operator)
        self.domains = tuple(domains)
        self.guard = guard
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_tunnels = max_tunnels
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False

    @classmethod
    async def open(cls, operator: Sequence[HostRule], domains: Sequence[HostRule], guard: AddressGuard, *,
                   connect_timeout_s: float = 10.0, idle_timeout_s: float = 300.0, max_tunnels: int = 32) -> EgressProxy:
        # A short path of its own (a Unix socket's is at most 107 bytes), in a directory only the server's user can enter.
        directory = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="stack-egress-"))
        proxy = cls(directory, operator, domains, guard, connect_timeout_s=connect_timeout_s, idle_timeout_s=idle_timeout_s,
                    max_tunnels=max_tunnels)
        try:
            proxy._server = await asyncio.start_unix_server(proxy._serve, path=str(proxy.socket_path), limit=MAX_HEAD_BYTES)
        except BaseException:
            await proxy.close()
            raise
        return proxy

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await asyncio.to_thread(shutil.rmtree, self.directory, True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT_S):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
                raise Refusal(400, "no complete request head") from None
            # Refused after its head is read: a Unix socket closed with unread bytes resets, and the client would see no answer.
            if len(self._connections) > self.max_tunnels:
                raise Refusal(503, f"this sandbox has {self.max_tunnels} connections open already")
            target = parse_request(head)
            upstream_reader, upstream_writer = await self._connect(target.host, target.port)
            try:
                if target.request is None:
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream_writer.write(target.request)
                await self._pipe((reader, writer), (upstream_reader, upstream_writer))
            finally:
                upstream_writer.close()
        except Refusal as refusal:
            log.info("sandbox egress refused (%d): %s", refusal.status, refusal.reason)
            await _answer(writer, refusal.status, refusal.reason)
        except (OSError, asyncio.IncompleteReadError):
            pass  # either side went away: nothing more to say to it
        except asyncio.CancelledError:
            if not self._closing:  # `close` ends its own connections; any other cancellation is not ours to swallow
                raise
        finally:
            self._connections.discard(task)
            writer.close()

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to an address of `host` the guard allows; the first that answers in time."""
        if not allows(self.operator, self.domains, host, port):
            raise Refusal(403, f"{host}:{port} is not allowed by this sandbox's network policy")
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as error:
            raise Refusal(502, f"{host} does not resolve ({error or 'no answer in time'})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        allowed = [address for address in addresses if self.guard(host, address)]
        if not allowed:
            raise Refusal(403, f"{host} resolves to a private or reserved address ({addresses[0]}), which sandboxes may not reach")
        failure = "no answer in time"
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                for address in allowed:
                    try:
                        return await asyncio.open_connection(address, port)
                    except OSError as error:
                        failure = str(error)
        except TimeoutError:
            raise Refusal(504, f"{host}:{port} did not answer in {self.connect_timeout_s:g} s") from None
        raise Refusal(502, f"{host}:{port} refused the connection ({failure})")

    async def _pipe(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        """Bytes both ways until both ends are done, or nothing has moved for `idle_timeout_s`."""
        activity = [time.monotonic()]
        copies = {asyncio.ensure_future(_copy(client[0], upstream[1], activity)),
                  asyncio.ensure_future(_copy(upstream[0], client[1], activity))}
        try:
            while not all(copy.done() for copy in copies):
                await asyncio.wait(copies, timeout=min(self.idle_timeout_s, 5.0))
                if any(copy.done() and copy.exception() for copy in copies):
                    return  # a reset on one side ends the other
                if time.monotonic() - activity[0] > self.idle_timeout_s:
                    return
        finally:
            for copy in copies:
                copy.cancel()
            await asyncio.gather(*copies, return_exceptions=True)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, activity: list[float]) -> None:
    while data := await reader.read(65536):
        activity[0] = time.monotonic()
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():  # a half-close is passed on: the other way may still have bytes to carry
        with contextlib.suppress(OSError):
            writer.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = f"{reason}\n".encode()
    head = (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with contextlib.suppress(OSError):
        writer.write(head.encode() + body)
        await writer.drain()
