"""`Pool`: the keep-alive connections to one origin, and the pool-wait timeout."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from collections import deque
from typing import Any

import httpx2

from runtime.transports.fast.connection import Connection

AddressGuard = Callable[[str, str], bool]
"""(host, address) -> whether a connection to host may be made at that address."""


class Pool:
    """The connections to one origin: idle ones (LIFO), a count of open ones, and waiters (FIFO)."""

    __slots__ = ("loop", "host", "port", "host_header", "tls", "max", "idle", "total", "waiters", "conns", "closed", "guard")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        host: str,
        port: int,
        host_header: bytes,
        tls: ssl.SSLContext | None,
        max_connections: int,
        guard: AddressGuard | None = None,
    ) -> None:
        self.loop = loop
        self.guard = guard
        self.host, self.port, self.host_header, self.tls = host, port, host_header, tls
        self.max = max_connections
        self.idle: list[Connection] = []
        self.total = 0  # connections open or being opened, i.e. slots taken
        self.waiters: deque[asyncio.Future[Connection | None]] = deque()
        self.conns: set[Connection] = set()
        self.closed = False

    def take(self) -> Connection | None:
        """The last idle connection, or None: a slot is reserved for the caller to open one (there is room)."""
        if self.idle:
            conn = self.idle.pop()
            conn.in_pool = False
            return conn
        self.total += 1
        return None

    async def wait(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> Connection | None:
        """Like `take`, once a connection (or a slot) is handed over by `release` or `slot_freed`."""
        waiter: asyncio.Future[Connection | None] = loop.create_future()
        self.waiters.append(waiter)
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter, httpx2.PoolTimeout, "pool")
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Cancelled after a connection (or slot) was handed over: pass it on, don't leak it.
                self._give_back(waiter.result())
            elif waiter in self.waiters:  # timed out or cancelled: don't pile up dead waiters
                self.waiters.remove(waiter)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _give_back(self, conn: Connection | None) -> None:
        if conn is None:
            self.slot_freed()
        elif conn.closed:
            conn.discard()
        else:
            self.release(conn)

    def release(self, conn: Connection) -> None:
        """Take back a reusable connection: to the first waiter, else onto the idle stack."""
        if self.closed:
            conn.discard()
            return
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(conn)
        else:
            conn.in_pool = True
            self.idle.append(conn)

    def slot_freed(self) -> None:
        """A connection is gone: its slot goes to the first waiter (to open a new one), or is freed."""
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(None)
        else:
            self.total -= 1

    def _next_waiter(self) -> asyncio.Future[Connection | None] | None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # skip those that timed out or were cancelled
                return waiter
        return None

    async def connect(self, timeout: float | None) -> Connection:
        """Open a connection in a slot the caller holds (the caller frees it on failure)."""
        if self.closed:
            raise RuntimeError("PooledTransport is closed")
        conn = Connection(self)
        where = f"{self.host}:{self.port}"
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._addresses()
                for index, address in enumerate(addresses):
                    try:
                        await self.loop.create_connection(
                            lambda: conn,
                            address,
                            self.port,
                            ssl=self.tls,
                            server_hostname=self.host if self.tls is not None else None,
                        )
                        break
                    except OSError:
                        if index == len(addresses) - 1:
                            raise
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            raise httpx2.ConnectTimeout(f"timed out connecting to {where}") from exc
        except OSError as exc:  # refused, DNS failure, TLS failure
            raise httpx2.ConnectError(f"cannot connect to {where}: {exc}") from exc
        self.conns.add(conn)
        return conn

    async def _addresses(self) -> list[str]:
        """Where to connect: the host itself (asyncio resolves it), or, under a guard, the
        addresses it resolves to that the guard allows, each tried in turn."""
        if self.guard is None:
            return [self.host]
        infos = await self.loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        allowed = [address for address in addresses if self.guard(self.host, address)]
        if not allowed:
            raise ConnectionRefusedError(f"{self.host} resolves to {', '.join(addresses)}, which this server may not reach")
        return allowed

    def close(self) -> None:
        """Close every connection and fail the waiters (the transport is closing)."""
        self.closed = True
        while (waiter := self._next_waiter()) is not None:
            waiter.set_exception(RuntimeError("PooledTransport is closed"))
        for conn in list(self.conns):
            conn.discard()

    def abandon(self) -> None:
        """Drop connections of a closed event loop; their sockets are closed best effort."""
        self.closed = True
        for conn in self.conns:
            conn.abort()
        self.conns.clear()
        self.idle.clear()


def _expire(waiter: asyncio.Future[Any], error: type[httpx2.TimeoutException], what: str) -> None:
    # The timer may fire in the same loop iteration as the result arrived: only time out a pending wait.
    if not waiter.done():
        waiter.set_exception(error(f"timed out waiting for the {what}"))
