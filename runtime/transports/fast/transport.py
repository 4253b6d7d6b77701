"""`PooledTransport`, the httpx2 transport, and the request encoding (head and body as one buffer)."""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import httpx2

from runtime.transports.fast._common import StaleConnection
from runtime.transports.fast.connection import Connection, ResponseStream
from runtime.transports.fast.pool import AddressGuard, Pool

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNKED = b"\r\ntransfer-encoding: chunked\r\n"
_HTTP11: Final = b"HTTP/1.1"


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
    always sets them; and `gap`, ours, for the waits between body chunks after the first);
    without it, `connect_timeout` applies and reads and pool waits are unbounded. Write timeouts
    are not enforced: the write is buffered by asyncio.

    A request on a reused connection that the server closed before sending any byte (the
    keep-alive race) is retried once on a fresh connection, as browsers and urllib3 do.

    With an `address_guard`, every new connection resolves its host itself and dials only the
    addresses the guard allows (runtime.security.netguard): a connection the guard refuses fails as a
    `ConnectError`, whatever DNS answered earlier and wherever a redirect pointed.

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
        address_guard: AddressGuard | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max_connections = max_connections
        self._connect_timeout = connect_timeout
        self._ssl_context = ssl_context
        self._guard = address_guard
        self._pools: dict[tuple[str, bytes], Pool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        pool = self._pool((url.scheme, url.netloc), url)
        head = _encode_head(request, pool.host_header)
        try:
            body = request.content
        except httpx2.RequestNotRead:  # a streamed body: read it all (it is sent in one write)
            body = await request.aread()
        conn, stream = await self._send(pool, _frame_body(head, body), request.method == "HEAD", request.extensions.get("timeout"))
        try:
            return httpx2.Response(conn.status, headers=conn.headers, stream=stream, extensions={"http_version": _HTTP11})
        except BaseException:
            conn.discard()
            raise

    def prepare(self, method: str, url: httpx2.URL, headers: list[tuple[bytes, bytes]]) -> PreparedRequest:
        """A request to `url` with `headers` (Host among them) and a body, encoded and validated once
        (as `handle_async_request` validates a head), for `send_prepared` to send with any body."""
        return PreparedRequest(url, (url.scheme, url.netloc), _prepared_head(method, url, headers))

    async def send_prepared(self, request: PreparedRequest, body: bytes,
                            timeouts: Mapping[str, float] | None = None) -> tuple[int, list[tuple[bytes, bytes]], ResponseStream]:
        """Send `request` with `body`: its answer's status, raw headers and body stream, as
        `handle_async_request` would put them in an `httpx2.Response`. For a caller that sends many
        requests alike: building the Request and Response objects (their headers normalized each
        time) cost more than the rest of the exchange. Timeouts and errors as for `handle_async_request`."""
        conn, stream = await self._send(self._pool(request.origin, request.url), request.encode(body), False, timeouts)
        return conn.status, conn.headers, stream

    def _pool(self, origin: tuple[str, bytes], url: httpx2.URL) -> Pool:
        """The pool of `origin` (`url`'s scheme and host), on the running loop."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        return self._pools.get(origin) or self._new_pool(url)

    async def _send(self, pool: Pool, payload: bytes, is_head: bool,
                    timeouts: Mapping[str, float] | None) -> tuple[Connection, ResponseStream]:
        gap_timeout = None
        if timeouts is None:
            connect_timeout, read_timeout, pool_timeout = self._connect_timeout, None, None
        else:
            connect_timeout = timeouts.get("connect", self._connect_timeout)
            read_timeout, pool_timeout = timeouts.get("read"), timeouts.get("pool")
            gap_timeout = timeouts.get("gap")  # ours: between two body chunks, once the first came
        # Fast path without a coroutine: an idle connection, or room to open one.
        conn = pool.take() if pool.idle or pool.total < pool.max else await pool.wait(pool.loop, pool_timeout)
        conn = await self._exchange(pool, conn, payload, is_head, connect_timeout, read_timeout)
        return conn, ResponseStream(conn, read_timeout, gap_timeout)

    async def aclose(self) -> None:
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()

    async def _exchange(
        self,
        pool: Pool,
        conn: Connection | None,
        payload: bytes,
        is_head: bool,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> Connection:
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
            except StaleConnection:
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

    def _new_pool(self, url: httpx2.URL) -> Pool:
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
        pool = Pool(self._loop, url.host, port, url.netloc, tls, self._max_connections, self._guard)
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
    # httpx2 puts Host first when it adds it; only a request built with `stream=` may lack it.
    if not raw or raw[0][0].lower() != b"host" and "host" not in request.headers:
        raw = [(b"Host", host_header), *raw]
    return _head(_method_bytes(request.method), request.url.raw_path, raw)


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request made by `PooledTransport.prepare`: its head, up to its Content-Length's value."""

    url: httpx2.URL
    origin: tuple[str, bytes]
    head: bytes

    def encode(self, body: bytes) -> bytes:
        """The whole request with `body`, as one buffer."""
        return self.head + b"%d\r\n\r\n" % len(body) + body


def _prepared_head(method: str, url: httpx2.URL, headers: list[tuple[bytes, bytes]]) -> bytes:
    head = _head(_method_bytes(method), url.raw_path, [*headers, (b"content-length", b"0")])
    return head[: -len(b"0\r\n\r\n")]


def _head(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    parts = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    head = b"".join(parts)
    lines = len(headers) + 2
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
