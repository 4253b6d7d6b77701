"""A sandbox's proxy, on its Unix socket: only the hosts both lists allow, only at addresses the guard
allows (public ones: 127.0.0.1 is refused unless the test opens it, as an operator's allow_private
would), with an HTTP answer saying why when it refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from contract.sandboxes.network import parse_host_rule
from contract.spec import AddressGuard
from providers.sandboxes.egress import EgressProxy, Refusal, parse_request
from runtime.security.netguard import AddressPolicy

LOOPBACK_OPEN = AddressPolicy(["127.0.0.0/8"]).allows
"""The test seam: what `allow_private: [127.0.0.0/8]` gives; production's default is AddressPolicy().allows."""


class Origin:
    """A local HTTP server that answers each request with the head it received."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(head), head))
        await writer.drain()
        writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    served = Origin()
    served.server = await asyncio.start_server(served._answer, "127.0.0.1", 0)
    yield served
    served.server.close()


async def proxy_for(port: int, guard: AddressGuard = LOOPBACK_OPEN, *, max_tunnels: int = 32,
                    idle_timeout_s: float = 300.0) -> EgressProxy:
    """The operator allows localhost on the origin's port and *.example.com; the container, localhost."""
    operator = [parse_host_rule(f"localhost:{port}"), parse_host_rule("*.example.com")]
    return await EgressProxy.open(operator, [parse_host_rule("localhost", with_port=False)], guard, max_tunnels=max_tunnels,
                                  idle_timeout_s=idle_timeout_s)


async def exchange(proxy: EgressProxy, *messages: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    received = b""
    for message in messages:
        writer.write(message)
        await writer.drain()
        if message.startswith(b"CONNECT"):
            received += await reader.readuntil(b"\r\n\r\n")
    received += await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return received


async def test_a_tunnel_to_an_allowed_host_carries_the_bytes_both_ways(origin: Origin) -> None:
    proxy = await proxy_for(origin.port)
    try:
        answer = await exchange(proxy, f"CONNECT localhost:{origin.port} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
                                b"GET /inside HTTP/1.1\r\nHost: localhost\r\n\r\n")
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK")
    assert origin.heads == [b"GET /inside HTTP/1.1\r\nHost: localhost\r\n\r\n"]


async def test_a_plain_http_request_goes_in_origin_form_to_the_judged_host_without_the_proxys_headers(origin: Origin) -> None:
    proxy = await proxy_for(origin.port)
    try:
        answer = await exchange(proxy, f"GET http://localhost:{origin.port}/a?b=1 HTTP/1.1\r\nHost: elsewhere.example.com\r\n"
                                       "Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n".encode())
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert origin.heads == [f"GET /a?b=1 HTTP/1.1\r\nHost: localhost:{origin.port}\r\nAccept: */*\r\nConnection: close\r\n\r\n".encode()]


async def test_the_loopback_is_refused_by_default_although_both_lists_allow_the_host(origin: Origin) -> None:
    proxy = await proxy_for(origin.port, guard=AddressPolicy().allows)
    try:
        answer = await exchange(proxy, f"CONNECT localhost:{origin.port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden") and b"private or reserved address" in answer
    assert origin.heads == []


@pytest.mark.parametrize(("request_line", "status", "words"), [
    ("CONNECT localhost:22 HTTP/1.1", b"403", b"not allowed by this sandbox's network policy"),  # a port the operator did not open
    ("CONNECT www.example.com:443 HTTP/1.1", b"403", b"not allowed"),  # the operator's, not the container's
    ("GET http://evil.test/ HTTP/1.1", b"403", b"not allowed"),
    ("GET /relative HTTP/1.1", b"400", b"absolute http:// URI"),
    ("GET https://localhost/ HTTP/1.1", b"400", b"CONNECT"),
    ("CONNECT localhost HTTP/1.1", b"400", b"host:port"),
    ("SSH-2.0-OpenSSH", b"400", b"not an HTTP/1 request"),
])
async def test_what_is_not_allowed_is_refused_before_anything_is_dialled(origin: Origin, request_line: str, status: bytes,
                                                                      words: bytes) -> None:
    proxy = await proxy_for(origin.port)
    try:
        answer = await exchange(proxy, f"{request_line}\r\n\r\n".encode())
    finally:
        await proxy.close()
    assert answer.split(b" ")[1] == status and words in answer
    assert origin.heads == []


async def test_a_host_that_refuses_the_connection_is_a_502(origin: Origin) -> None:
    port = origin.port
    assert origin.server is not None
    origin.server.close()
    await origin.server.wait_closed()
    proxy = await proxy_for(port)
    try:
        answer = await exchange(proxy, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway") and b"refused" in answer


async def test_connections_past_the_cap_are_refused_and_close_ends_the_open_ones(origin: Origin) -> None:
    proxy = await proxy_for(origin.port, max_tunnels=2)
    opened = []
    for _ in range(2):  # tunnels held open: the origin waits for a request that does not come
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(f"CONNECT localhost:{origin.port} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        opened.append((reader, writer))
    answer = await exchange(proxy, f"CONNECT localhost:{origin.port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 503") and b"2 connections open already" in answer
    await proxy.close()
    assert [await asyncio.wait_for(reader.read(), 5) for reader, _ in opened] == [b"", b""]
    assert not proxy.directory.exists()


async def test_an_idle_tunnel_is_closed(origin: Origin) -> None:
    proxy = await proxy_for(origin.port, idle_timeout_s=0.2)
    try:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(f"CONNECT localhost:{origin.port} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        await proxy.close()


def test_a_request_head_is_read_for_its_target() -> None:
    assert parse_request(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n").host == "2001:db8::1"
    target = parse_request(b"POST http://a.example.com:8080/x HTTP/1.0\r\nContent-Length: 2\r\n\r\n")
    assert (target.host, target.port) == ("a.example.com", 8080)
    assert target.request == b"POST /x HTTP/1.0\r\nHost: a.example.com:8080\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
    with pytest.raises(Refusal):
        parse_request(b"GET http://a.example.com:99999/ HTTP/1.1\r\n\r\n")
