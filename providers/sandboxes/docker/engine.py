"""The Docker Engine API, as much of it as the sandboxes use: JSON calls over httpx2, and the one
call httpx2 cannot make, `attach`, over a connection of our own.

`attach` is a hijacked HTTP connection: after the `101 UPGRADED` answer the socket carries the
container's stdin one way and, the other way, its stdout and stderr multiplexed in frames (a byte
for the stream, three zeros, a 4-byte big-endian length, the bytes), since the container has no
TTY. The kernel's protocol runs over stdin and the stdout frames.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx2

from contract.spec import HttpClientFactory
from providers.sandboxes.kernel_client import KernelDied

__all__ = ["API_VERSION", "AttachPipe", "EngineError", "attach", "engine_client"]

API_VERSION = "v1.41"
_FRAME = struct.Struct(">BxxxI")


class EngineError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the Docker Engine answered {status}: {message}")
        self.status = status


def engine_client(url: str, make_client: HttpClientFactory | None, timeout: float) -> httpx2.AsyncClient:
    """A client of the Engine at `url`: `unix:///path/docker.sock`, or `http://host:port` (through the
    stack's own client factory, as every remote call is)."""
    if url.startswith("unix://"):
        transport = httpx2.AsyncHTTPTransport(uds=url[len("unix://"):])
        return httpx2.AsyncClient(transport=transport, base_url=f"http://docker/{API_VERSION}", timeout=timeout)
    base_url = f"{url.rstrip('/')}/{API_VERSION}"
    return make_client(base_url=base_url, timeout=timeout) if make_client else httpx2.AsyncClient(base_url=base_url, timeout=timeout)


async def check(response: httpx2.Response) -> Any:
    """The answer's JSON (None when it has none); raises `EngineError` on an error status."""
    if response.status_code >= 400:
        await response.aread()
        try:
            message = str(response.json().get("message", response.text))
        except ValueError:
            message = response.text
        raise EngineError(response.status_code, message[:500])
    if not response.content:
        return None
    return response.json() if "json" in response.headers.get("content-type", "") else response.content


class AttachPipe:
    """A `kernel_client.Pipe` over an attach connection; `kill` is given by the backend (the Engine's kill)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kill: Callable[[], Awaitable[None]]) -> None:
        self.reader, self.writer, self._kill = reader, writer, kill
        self.buffer = bytearray()
        self.stderr: collections.deque[bytes] = collections.deque(maxlen=16)

    async def send(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, RuntimeError) as error:
            raise KernelDied("the attach connection closed") from error

    async def receive(self, size: int) -> bytes:
        while len(self.buffer) < size:
            try:
                stream, length = _FRAME.unpack(await self.reader.readexactly(_FRAME.size))
                payload = await self.reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError):
                raise KernelDied(b"".join(self.stderr).decode(errors="replace")[-500:] or "the container exited") from None
            if stream == 1:
                self.buffer += payload
            else:
                self.stderr.append(payload)
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def kill(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
        await self._kill()


async def attach(url: str, container: str, kill: Callable[[], Awaitable[None]]) -> AttachPipe:
    """Attach to a container's stdin, stdout and stderr (before it starts, so that nothing it writes is missed)."""
    if url.startswith("unix://"):
        reader, writer = await asyncio.open_unix_connection(url[len("unix://"):])
    else:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 2375)
    path = f"/{API_VERSION}/containers/{container}/attach?stream=1&stdin=1&stdout=1&stderr=1"
    writer.write(f"POST {path} HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n".encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    if status not in (101, 200):
        writer.close()
        raise EngineError(status, f"attach to {container} was refused: {head.splitlines()[0]}")
    return AttachPipe(reader, writer, kill)
