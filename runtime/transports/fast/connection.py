"""`Connection`: one keep-alive connection (an `asyncio.Protocol` feeding httptools), and the response body stream."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Final, Protocol

import httptools
import httpx2

from runtime.transports.fast._common import StaleConnection

# Body bytes buffered but not yet consumed above which the socket stops being read,
# and below which it is read again: bounds memory when the caller reads slowly.
HIGH_WATER: Final = 256 * 1024
LOW_WATER: Final = 64 * 1024

# Connection states (plain ints: compared on every callback).
_IDLE: Final = 0  # no request in flight
_HEADERS: Final = 1  # request sent, waiting for the final status line and headers
_BODY: Final = 2  # headers done, body still arriving
_DONE: Final = 3  # whole response received
_NEVER: Final = float("inf")


class Owner(Protocol):
    """What a connection asks of the pool it belongs to (`pool.Pool`): the pool knows its
    connections, a connection knows its pool only through this."""

    loop: asyncio.AbstractEventLoop
    idle: list[Connection]
    conns: set[Connection]

    def release(self, conn: Connection) -> None: ...

    def slot_freed(self) -> None: ...


class Connection(asyncio.Protocol):
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

    def __init__(self, pool: Owner) -> None:
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
            self.error = StaleConnection()
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


class ResponseStream(httpx2.AsyncByteStream):
    """The response body, chunk by chunk as received; releases or closes the connection at the end.

    `timeout` bounds the wait for the first body bytes, `gap` (when given) each wait after them: a
    model may think long before its first token, but a stream that has started and then stalls
    should fail within the gap."""

    def __init__(self, conn: Connection, timeout: float | None, gap: float | None = None) -> None:
        self._conn: Connection | None = conn
        self._timeout = timeout
        self._gap = gap

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
        if self._gap is not None:
            self._timeout, self._gap = self._gap, None
        return chunk

    def _abort(self, conn: Connection) -> None:
        self._conn = None
        conn.discard()

    async def aclose(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.finish()
