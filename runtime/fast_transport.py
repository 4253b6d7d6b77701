"""A fast HTTP/1.1 keep-alive transport for httpx2: asyncio protocols + the httptools C parser.

See `PooledTransport` for the design.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Final

import httptools
import httpx2

__all__ = ["PooledTransport"]

# Body bytes buffered but not yet consumed above which the socket stops being read,
# and below which it is read again: bounds memory when the caller reads slowly.
HIGH_WATER: Final = 256 * 1024
LOW_WATER: Final = 64 * 1024

# Connection states (plain ints: compared on every callback).
_IDLE: Final = 0  # no request in flight
_HEADERS: Final = 1  # request sent, waiting for the final status line and headers
_BODY: Final = 2  # headers done, body still arriving
_DONE: Final = 3  # whole response received

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNKED = b"\r\ntransfer-encoding: chunked\r\n"
_HTTP11: Final = b"HTTP/1.1"
_NEVER: Final = float("inf")


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any response byte: safe to retry."""


class PooledTransport(httpx2.AsyncBaseTransport):
    """HTTP/1.1 client transport: one `asyncio.Protocol` per keep-alive connection, parsed by httptools.

    Why it is fast, compared with httpx2's default httpcore2 + h11 + anyio stack:

    - Parsing is done by llhttp in C (httptools), driven straight from `data_received`: no
      pure-Python state machine, no read loop, no per-request task. The caller's own task
      awaits one future for the headers, then one per socket read only when no body bytes
      are buffered yet; whatever is buffered is handed over as one chunk.
    - The request head and a known-length body go out in one `transport.write`.
    - Read timeouts use one timer per connection that is re-armed only when it fires before
      its deadline, not a timer (or an `asyncio.timeout` cancel scope) per wait.

    Pooling: one pool per origin (scheme, host, port). Idle connections are reused LIFO (the
    warmest socket, and the coldest ones age out on the server). At most `max_connections`
    are open per origin; further requests queue FIFO and get a released connection (or the
    right to open one) handed over directly, so a waiter cannot be overtaken. A connection
    goes back to the pool only once its response was received completely and the server did
    not ask to close it; a response closed before its end arrived closes its connection.

    Timeouts come from `request.extensions["timeout"]` (connect, read, pool; httpx2's client
    always sets them); without it, `connect_timeout` applies and reads and pool waits are
    unbounded. Write timeouts are not enforced: the write is buffered by asyncio.

    A request on a reused connection that the server closed before sending any byte (the
    keep-alive race) is retried once on a fresh connection, as browsers and urllib3 do.

    Not supported: HTTP/2, proxies, upgrades (101), streaming request bodies (they are read
    fully and sent as one chunk), reason phrases other than the standard ones. A transport
    belongs to one event loop at a time: once that loop is closed, the next one to use it
    starts afresh (the old connections are dropped).
    """

    def __init__(
        self,
        max_connections: int = 256,
        connect_timeout: float | None = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max_connections = max_connections
        self._connect_timeout = connect_timeout
        self._ssl_context = ssl_context
        self._pools: dict[tuple[str, bytes], _Pool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        url = request.url
        pool = self._pools.get((url.scheme, url.netloc)) or self._new_pool(url)
        timeouts = request.extensions.get("timeout")
        if timeouts is None:
            connect_timeout, read_timeout, pool_timeout = self._connect_timeout, None, None
        else:
            connect_timeout = timeouts.get("connect", self._connect_timeout)
            read_timeout, pool_timeout = timeouts.get("read"), timeouts.get("pool")
        head = _encode_head(request, pool.host_header)
        try:
            body = request.content
        except httpx2.RequestNotRead:  # a streamed body: read it all (it is sent in one write)
            body = await request.aread()
        payload = _frame_body(head, body)
        # Fast path without a coroutine: an idle connection, or room to open one.
        conn = pool.take() if pool.idle or pool.total < pool.max else await pool.wait(loop, pool_timeout)
        conn = await self._exchange(pool, conn, payload, request.method == "HEAD", connect_timeout, read_timeout)
        try:
            return httpx2.Response(
                conn.status,
                headers=conn.headers,
                stream=_ResponseStream(conn, read_timeout),
                extensions={"http_version": _HTTP11},
            )
        except BaseException:
            conn.discard()
            raise

    async def aclose(self) -> None:
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()

    async def _exchange(
        self,
        pool: _Pool,
        conn: _Connection | None,
        payload: bytes,
        is_head: bool,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> _Connection:
        """Send `payload` and wait for the response headers; `conn` None means: open one (slot is ours)."""
        while True:
            if conn is not None and conn.closed:
                # A handed-over connection died in transit: its slot is reused for a new one.
                conn.forget_slot()
                conn = None
            try:
                if conn is None:
                    conn = await pool.connect(connect_timeout)
                conn.send(payload, is_head)
                await conn.wait_headers(read_timeout)
                return conn
            except _StaleConnection:
                pass  # conn is closed: the next round opens a fresh one in its slot
            except BaseException:
                # Whatever happened (timeout, cancellation, protocol error), the connection's
                # state is unknown: close it rather than hand it to the next request.
                if conn is None:
                    pool.slot_freed()
                else:
                    conn.discard()
                raise

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tie the transport to `loop`; connections of a finished (closed) loop are dropped."""
        if self._closed:
            raise RuntimeError("PooledTransport is closed")
        old = self._loop
        if old is not None and not old.is_closed():
            raise RuntimeError("PooledTransport is bound to another event loop that is still open")
        for pool in self._pools.values():
            pool.abandon()
        self._pools = {}
        self._loop = loop

    def _new_pool(self, url: httpx2.URL) -> _Pool:
        if self._closed:
            raise RuntimeError("PooledTransport is closed")
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        if not url.host:
            raise httpx2.UnsupportedProtocol(f"URL has no host: {url}")
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            tls = self._ssl_context or self._default_ssl_context()
        port = url.port or (443 if scheme == "https" else 80)
        assert self._loop is not None
        pool = _Pool(self._loop, url.host, port, url.netloc, tls, self._max_connections)
        self._pools[(scheme, url.netloc)] = pool
        return pool

    def _default_ssl_context(self) -> ssl.SSLContext:
        # Created on first https use: loading the CA bundle takes milliseconds.
        context = ssl.create_default_context()
        context.set_alpn_protocols(["http/1.1"])
        self._ssl_context = context
        return context


_METHODS: dict[str, bytes] = {}


def _method_bytes(method: str) -> bytes:
    """The method as bytes, validated once per distinct method (it goes into the request line)."""
    encoded = _METHODS.get(method)
    if encoded is None:
        encoded = method.encode("ascii", "replace")
        if not _TOKEN.fullmatch(encoded):
            raise httpx2.LocalProtocolError(f"invalid HTTP method {method!r}")
        if len(_METHODS) < 64:  # bounded: methods are caller input
            _METHODS[method] = encoded
    return encoded


def _encode_head(request: httpx2.Request, host_header: bytes) -> bytes:
    """The request line and headers, validated, as one buffer."""
    raw = request.headers.raw
    parts = [_method_bytes(request.method), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    lines = len(raw) + 2
    # httpx2 puts Host first when it adds it; only a request built with `stream=` may lack it.
    if not raw or raw[0][0].lower() != b"host" and "host" not in request.headers:
        parts += (b"Host: ", host_header, b"\r\n")
        lines += 1
    for name, value in raw:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    head = b"".join(parts)
    # CR, LF or NUL inside a name or value would let a header smuggle others in: each line
    # must end with exactly one CRLF. Two C-speed scans instead of a per-header check.
    if head.count(b"\n") != lines or head.count(b"\r") != lines or b"\0" in head:
        raise httpx2.LocalProtocolError("invalid character in a request header")
    return head


def _frame_body(head: bytes, body: bytes) -> bytes:
    """Head and body as one buffer for a single write."""
    if not body:
        return head
    if _CHUNKED in head.lower():
        # A streamed body, read fully, still announced as chunked: send it as one chunk.
        return b"".join((head, b"%x\r\n" % len(body), body, b"\r\n0\r\n\r\n"))
    return head + body


class _Pool:
    """The connections to one origin: idle ones (LIFO), a count of open ones, and waiters (FIFO)."""

    __slots__ = ("loop", "host", "port", "host_header", "tls", "max", "idle", "total", "waiters", "conns", "closed")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        host: str,
        port: int,
        host_header: bytes,
        tls: ssl.SSLContext | None,
        max_connections: int,
    ) -> None:
        self.loop = loop
        self.host, self.port, self.host_header, self.tls = host, port, host_header, tls
        self.max = max_connections
        self.idle: list[_Connection] = []
        self.total = 0  # connections open or being opened, i.e. slots taken
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self.conns: set[_Connection] = set()
        self.closed = False

    def take(self) -> _Connection | None:
        """The last idle connection, or None: a slot is reserved for the caller to open one (there is room)."""
        if self.idle:
            conn = self.idle.pop()
            conn.in_pool = False
            return conn
        self.total += 1
        return None

    async def wait(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> _Connection | None:
        """Like `take`, once a connection (or a slot) is handed over by `release` or `slot_freed`."""
        waiter: asyncio.Future[_Connection | None] = loop.create_future()
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

    def _give_back(self, conn: _Connection | None) -> None:
        if conn is None:
            self.slot_freed()
        elif conn.closed:
            conn.discard()
        else:
            self.release(conn)

    def release(self, conn: _Connection) -> None:
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

    def _next_waiter(self) -> asyncio.Future[_Connection | None] | None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # skip those that timed out or were cancelled
                return waiter
        return None

    async def connect(self, timeout: float | None) -> _Connection:
        """Open a connection in a slot the caller holds (the caller frees it on failure)."""
        if self.closed:
            raise RuntimeError("PooledTransport is closed")
        conn = _Connection(self)
        where = f"{self.host}:{self.port}"
        try:
            async with asyncio.timeout(timeout):
                await self.loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                )
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            raise httpx2.ConnectTimeout(f"timed out connecting to {where}") from exc
        except OSError as exc:  # refused, DNS failure, TLS failure
            raise httpx2.ConnectError(f"cannot connect to {where}: {exc}") from exc
        self.conns.add(conn)
        return conn

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


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parser callbacks fill in the response, the caller's task waits on `waiter`."""

    __slots__ = (
        "pool",
        "loop",
        "transport",
        "parser",
        "state",
        "status",
        "headers",
        "chunks",
        "buffered",
        "paused",
        "waiter",
        "error",
        "closed",
        "reusable",
        "in_pool",
        "slot_held",
        "reused",
        "got_bytes",
        "is_head",
        "timer",
        "deadline",
        "waiting_for",
    )

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.state = _IDLE
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        self.error: Exception | None = None
        self.closed = False
        self.reusable = False
        self.in_pool = False
        self.slot_held = True  # counted in pool.total until discarded
        self.reused = False  # served a request before: a close before any byte may be the keep-alive race
        self.got_bytes = False
        self.is_head = False
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0
        self.waiting_for = ""

    # -- used by the transport and the response stream --------------------------------------

    def send(self, payload: bytes, is_head: bool) -> None:
        self.state = _HEADERS
        self.headers = []
        self.error = None
        self.got_bytes = False
        self.is_head = is_head
        self.transport.write(payload)  # type: ignore[union-attr]  # set in connection_made

    async def wait_headers(self, timeout: float | None) -> None:
        while self.state == _HEADERS:
            if self.error is not None:
                raise self.error
            await self.wait(timeout, "response headers")

    def wait(self, timeout: float | None, what: str) -> asyncio.Future[None]:
        """A future for the next parser event (or connection loss); it fails after `timeout` seconds.

        One timer per connection, re-armed only when it fires early, instead of one per wait:
        a stream waits once per socket read, and a timer costs more than the rest of the wait.
        """
        loop = self.loop
        waiter: asyncio.Future[None] = loop.create_future()
        self.waiter = waiter
        if timeout is None:
            self.deadline = _NEVER  # a timer armed by an earlier wait must not fire on this one
        else:
            self.waiting_for = what
            self.deadline = deadline = loop.time() + timeout
            timer = self.timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self.timer = loop.call_at(deadline, self._check_deadline)
        return waiter

    def _check_deadline(self) -> None:
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # nothing waits any more: stay disarmed until the next wait
        deadline = self.deadline
        if deadline > self.loop.time():
            if deadline != _NEVER:  # data came meanwhile: wait out the rest
                self.timer = self.loop.call_at(deadline, self._check_deadline)
            return
        waiter.set_exception(httpx2.ReadTimeout(f"timed out waiting for the {self.waiting_for}"))

    def consumed(self, size: int) -> None:
        self.buffered -= size
        if self.paused and self.buffered <= LOW_WATER and not self.closed:
            self.paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    def finish(self) -> None:
        """The caller is done with the response: back to the pool if fully received, else close."""
        if self.state != _DONE or not self.reusable or self.closed:
            self.discard()
            return
        self.state = _IDLE
        self.reused = True
        self.chunks.clear()
        self.consumed(self.buffered)
        self.pool.release(self)

    def discard(self) -> None:
        """Close the socket and give up the pool slot (idempotent)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.in_pool:
            self.in_pool = False
            self.pool.idle.remove(self)
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()  # connection_lost will wake a waiting owner
        if self.slot_held:
            self.slot_held = False
            self.pool.conns.discard(self)
            self.pool.slot_freed()

    def forget_slot(self) -> None:
        """This closed connection's slot is taken over by its replacement."""
        self.slot_held = False
        self.pool.conns.discard(self)

    def abort(self) -> None:
        self.closed = True
        self.slot_held = False
        try:
            if self.transport is not None:
                self.transport.abort()
        except Exception:  # its event loop is closed: best effort, the GC closes the socket
            pass

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        """Record why the response cannot complete, wake the waiter, and close the socket."""
        if self.error is None:
            self.error = error
        self._wake()
        if not self.closed:
            self.closed = True
            self.transport.close()  # type: ignore[union-attr]

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport from create_connection

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.state == _IDLE or self.state == _DONE:
            # Bytes nobody asked for: the stream is out of sync, never reuse it.
            self.reusable = False
            self._fail(httpx2.RemoteProtocolError("received data while no response was expected"))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx2.RemoteProtocolError("protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            self._fail(httpx2.RemoteProtocolError(f"invalid HTTP response: {exc}"))
        # One wake-up per socket read, not per parser callback; a waiter woken for nothing
        # (half a header) just waits again.
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost decides what it means

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.in_pool:
            # The server closed an idle keep-alive connection: drop it from the pool.
            self.discard()
            return
        if self.state == _HEADERS:
            self._lost_before_response(exc)
        elif self.state == _BODY:
            self._lost_in_body(exc)
        self._wake()

    def _lost_before_response(self, exc: Exception | None) -> None:
        if self.reused and not self.got_bytes:
            self.error = _StaleConnection()
        elif exc is not None:
            self.error = httpx2.ReadError(f"connection lost: {exc}")
        else:
            self.error = httpx2.RemoteProtocolError("server disconnected without sending a response")

    def _lost_in_body(self, exc: Exception | None) -> None:
        if exc is None and self._body_ends_at_close():
            self.state = _DONE
            self.reusable = False
        elif exc is not None:
            self.error = httpx2.ReadError(f"connection lost while reading the response body: {exc}")
        else:
            self.error = httpx2.RemoteProtocolError("server closed the connection before the response body ended")

    def _body_ends_at_close(self) -> bool:
        """No Content-Length and not chunked: the body is delimited by the server closing (RFC 9112 6.3)."""
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"content-length" or lowered == b"transfer-encoding" and b"chunked" in value.lower():
                return False
        return True

    # -- httptools callbacks (data_received wakes the waiter once they have run) ---------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.state != _HEADERS:
            # A second response on the wire after this one: the server is out of sync.
            raise httpx2.RemoteProtocolError("received a response nobody asked for")
        status = self.parser.get_status_code()
        if status < 200:
            # An interim response (100 Continue, 103 Early Hints): llhttp goes on with the next one.
            self.headers = []
            return
        self.status = status
        if self.is_head:
            # httptools cannot tell llhttp to skip a HEAD response's announced body, so the
            # response ends here and the connection (whose parser state is now wrong) is dropped.
            self.state = _DONE
            self.reusable = False
        else:
            self.state = _BODY

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    def on_message_complete(self) -> None:
        if self.state == _BODY:  # not the end of an interim response
            self.state = _DONE
            self.reusable = self.parser.should_keep_alive()


class _ResponseStream(httpx2.AsyncByteStream):
    """The response body, chunk by chunk as received; releases or closes the connection at the end."""

    def __init__(self, conn: _Connection, timeout: float | None) -> None:
        self._conn: _Connection | None = conn
        self._timeout = timeout

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        chunks = conn.chunks
        while not chunks:
            if conn.state == _DONE:
                self._conn = None
                conn.finish()
                raise StopAsyncIteration
            if conn.error is not None:
                self._abort(conn)
                raise conn.error
            try:
                await conn.wait(self._timeout, "next response body chunk")
            except BaseException:
                self._abort(conn)
                raise
        if len(chunks) == 1:
            chunk = chunks.popleft()
        else:
            # Hand over everything already received at once: each chunk costs a trip through
            # httpx2's stream layers, and one socket read often holds many (SSE events).
            chunk = b"".join(chunks)
            chunks.clear()
        conn.consumed(len(chunk))
        return chunk

    def _abort(self, conn: _Connection) -> None:
        self._conn = None
        conn.discard()

    async def aclose(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.finish()
