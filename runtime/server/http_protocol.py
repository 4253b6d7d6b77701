"""uvicorn's HTTP/1.1 protocol (httptools) with the limits on receiving a request that it lacks.

uvicorn times out nothing while a request arrives: its keep-alive timer runs only between requests and
stops at the first byte, and a connection that never sends one is never closed. Nor does it bound a
request's head: httptools gathers a header of any size. One client could hold every connection the
process may open by sending a head a byte at a time (Slowloris), or a body that never ends, and grow the
server's memory with one endless header. ASGI middleware cannot help: the app is called only once the
head is whole. So the limits are kept here, as nginx keeps its `client_header_timeout`,
`client_body_timeout` and `large_client_header_buffers`:

- a request's head (its request line and headers) must arrive within `header_timeout_s` of its first byte,
  and a new connection must send one within that time: else a 408 (or, if it sent nothing, the
  connection is closed without a word);
- a head larger than `max_header_bytes` is a 431;
- while a body arrives, no more than `body_timeout_s` may pass between two reads of it (not counting time
  the server itself stopped reading, as it does while the app has not taken what came): else a 408;
- what the parser cannot read is a 400 like the rest, where uvicorn's own answer is plain text;
- a keep-alive connection left idle (its answer sent, no new request begun) for `keep_alive_timeout_s` is
  closed, as uvicorn's own timer would close it; the sweep below does it instead, as that timer, armed after
  every answer and cancelled by the next request, cost 1.5 to 3 µs a request.

Each refusal is in OpenAI's error shape. The connection is then shut for writing and what the client
still sends is dropped until it closes, for at most LINGER_S, as nginx's lingering close does: closed at
once, a socket with unread data resets the connection, and the client may never read the answer. The
timeouts are checked by one sweep over the open connections (`sweep`), a few times a second: a request
pays a few attribute stores and clock reads, not a timer of its own. A head's size is bounded by the
reads it came in, and measured only when those could hold more than the limit; while it is not whole,
the reads it has taken are counted, so an endless one is refused as soon as it runs past the limit.

An answer leaves in one write (`_OneWriteAnswer`): its head is held for the first part of its body.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from itertools import chain
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from contract import fastjson
from runtime.http.departure import DEPARTURE
from runtime.http.middleware import new_request_id

__all__ = ["HttpLimits", "guarded_protocol", "sweep"]

log = logging.getLogger(__name__)

# What a connection is waiting for, as far as its limits go.
_NOTHING, _FIRST_REQUEST, _HEAD, _BODY, _CLOSING, _IDLE = 0, 1, 2, 3, 4, 5
LINGER_S = 2.0  # after a refusal: how long what the client still sends is read and dropped, so it reads the answer


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_header_bytes: int
    keep_alive_timeout_s: float = 5.0

    @property
    def sweep_every_s(self) -> float:
        """Often enough that a limit is enforced within a quarter of it (at most a second) of its end."""
        return min(1.0, self.header_timeout_s / 4, self.body_timeout_s / 4, self.keep_alive_timeout_s / 4)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, keeping the time and size limits of the request it is receiving.

    The parser's callbacks only note what the connection waits for and count its reads; `expire`,
    called by the sweep, dates each state the first time it sees it (a clock read per callback cost
    as much as the rest of this class) and ends what has waited too long."""

    def __init__(self, *args: Any, limits: HttpLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._waiting = _NOTHING
        self._reads = 0  # reads so far: a body that moves
        self._heads = 0  # heads begun so far: which one is waited for
        self._head_bytes = 0  # of the head under way: the reads after the one it began in, until it is whole
        self._read = 0  # bytes in the read being parsed
        self._begin_read = 0  # bytes in the read the head under way began in
        self._seen: tuple[int, int, float] | None = None  # (state, its marker, when the sweep first saw them)
        self._departures: list[Callable[[], None]] = []  # to call if the client leaves (runtime.http.departure)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting = _FIRST_REQUEST

    def data_received(self, data: bytes) -> None:
        waiting = self._waiting
        if waiting == _CLOSING:
            return  # refused: dropped unread
        self._read = len(data)
        self._reads += 1
        super().data_received(data)
        if waiting == _HEAD and self._waiting == _HEAD:
            # A read that neither began nor finished the head: all of it is head. (The read a head
            # begins in may hold the end of the request before it, so it is not counted.)
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse_large_head()

    # The parser's callbacks. After a refusal, the rest of the read being parsed is dropped.

    def on_message_begin(self) -> None:
        if self._waiting != _CLOSING:
            super().on_message_begin()
            self._waiting, self._head_bytes, self._begin_read = _HEAD, 0, self._read
            self._heads += 1

    def on_headers_complete(self) -> None:
        if self._waiting == _CLOSING:
            return
        limit = self.limits.max_header_bytes
        # The reads it came in bound its size: only a head that may be over the limit is measured.
        if self._begin_read + self._head_bytes + self._read > limit and len(self.url) + sum(map(len, chain.from_iterable(self.headers))) > limit:
            self._refuse_large_head()
            return
        self._waiting = _BODY
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not before and cycle is not None:  # a request cycle begun (not a WebSocket upgrade)
            cycle.transport = _OneWriteAnswer(self.transport, cycle, self.loop)  # type: ignore[assignment]
            # An ASGI extension's value is a dict (runtime.http.departure reads its "notice").
            self.scope.setdefault("extensions", {})[DEPARTURE] = {"notice": self._on_departure}

    def _on_departure(self, callback: Callable[[], None]) -> Callable[[], None]:
        """runtime.http.departure's notice: `callback` is called once if the connection is lost (or refused)
        while the request is answered. Only the request whose app runs can register: a pipelined one
        waits for the answer before it."""
        if self._waiting == _CLOSING or self.transport.is_closing():
            return self.loop.call_soon(callback).cancel  # gone already
        departures = self._departures
        departures.append(callback)

        def forget() -> None:
            if callback in departures:
                departures.remove(callback)

        return forget

    def _depart(self) -> None:
        departures, self._departures = self._departures, []
        for callback in departures:
            try:
                callback()
            except Exception:  # one failing must not keep the others from stopping their work
                log.exception("a callback for a departed client failed")

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._departures:
            self._depart()

    def expire(self, now: float) -> None:
        """End the connection if what it waits for is late (called by `sweep`)."""
        waiting = self._waiting
        cycle = self.cycle
        if waiting == _BODY and (cycle is None or not cycle.more_body or self.flow.read_paused):
            # Received whole (uvicorn's cycle says so), or not read on by the server itself (the app
            # has not taken what came): not the client's to hurry. Once answered, the connection is idle.
            waiting = _IDLE if cycle is not None and cycle.response_complete else _NOTHING
        if waiting == _NOTHING or self.transport.is_closing():
            self._seen = None
            return
        marker = self._reads if waiting == _BODY else self._heads  # an idle connection stays idle until a head begins
        seen = self._seen
        if seen is None or seen[0] != waiting or seen[1] != marker:
            self._seen = (waiting, marker, now)
            return
        waited = now - seen[2]
        if waiting == _IDLE:
            if waited > self.limits.keep_alive_timeout_s:
                self.transport.close()
        elif waiting == _CLOSING:
            if waited > LINGER_S:
                self.transport.close()
        elif waiting == _BODY:
            if waited > self.limits.body_timeout_s:
                self._refuse(408, "request_timeout", f"The request's body did not arrive in time (nothing for {self.limits.body_timeout_s:g} s).")
        elif waited <= self.limits.header_timeout_s:
            return
        elif waiting == _FIRST_REQUEST:
            self.transport.close()  # it never said anything: there is nothing to answer
        elif self.cycle is not None and not self.cycle.response_complete:
            self._seen = (waiting, marker, now)  # the answer to the request before it is still being sent: wait for it
        else:
            self._refuse(408, "request_timeout", f"The request's headers did not arrive within {self.limits.header_timeout_s:g} s.")

    def on_response_complete(self) -> None:
        """uvicorn's, without arming its keep-alive timer: the sweep closes an idle connection."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)

    def send_400_response(self, msg: str) -> None:
        """What the parser cannot read (a malformed request line or header, a body framed two ways,
        broken chunks): a 400 in OpenAI's shape, where uvicorn's own is plain text."""
        self._refuse(400, "invalid_http_request", "The request is not valid HTTP/1.1.")

    def _refuse_large_head(self) -> None:
        self._refuse(431, "request_header_fields_too_large", f"The request's headers are larger than {self.limits.max_header_bytes} bytes.")

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer `status` (unless an answer to this connection is under way) and end the connection."""
        cycle = self.cycle
        receiving_body = self._waiting == _BODY
        self._waiting = _CLOSING
        # An answer under way is this request's own (its body was late), or the one before's (a
        # pipelined request's head was refused): either way no other answer can follow it.
        answered = cycle is None or (not cycle.response_started if receiving_body else cycle.response_complete)
        if cycle is not None and not cycle.response_complete:
            # What connection_lost does, at once: the app's reads see the client gone and its
            # writes go nowhere.
            cycle.disconnected = True
            cycle.message_event.set()
            self._depart()
        if not receiving_body:
            # The rest of a read being parsed may hold a body for the refused head: uvicorn's
            # callbacks drop what comes for a request whose answer is complete.
            self.cycle = _Refused()  # type: ignore[assignment]
        _log_refusal(self.client, message)
        if answered:
            self.transport.write(_error_response(status, code, message))
            if self.transport.can_write_eof():
                self.transport.write_eof()
                return
        self.transport.close()


class _OneWriteAnswer:
    """The transport as a request cycle sees it: an answer's head goes out with the first part of its body,
    in one system call.

    uvicorn writes the head as soon as the app starts its answer, and the body in a second write; the first
    wakes the client, which then waits for the second. So the head is held: when a content-length says a body
    follows, until the body's first write; a stream's (chunked), until its first part or the end of the event
    loop's turn, whichever comes first, so a stream whose first event is slow still shows its head at once.
    An answer the app ends before its body (an error) is closed without its head, as a client sees a
    connection lost either way."""

    __slots__ = ("transport", "cycle", "loop", "held", "head_written")

    def __init__(self, transport: asyncio.Transport, cycle: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.cycle: Any = cycle
        self.loop = loop
        self.held: bytes | None = None
        self.head_written = False

    def write(self, data: bytes) -> None:
        if self.head_written:
            held = self.held
            if held is None:
                self.transport.write(data)
            else:
                self.held = None
                self.transport.writelines((held, data))  # one writev, the body not copied
            return
        cycle = self.cycle
        if cycle.response_started:  # the head: before the answer starts, only a "100 Continue" is written
            self.head_written = True
            self.cycle = None  # not needed any more: the cycle (which holds this) is freed without the GC
            if cycle.scope["method"] != "HEAD":  # whose answer has no body to wait for
                if cycle.chunked_encoding:
                    self.held = data
                    self.loop.call_soon(self._flush)
                    return
                if cycle.expected_content_length:
                    self.held = data
                    return
        self.transport.write(data)

    def _flush(self) -> None:
        held = self.held
        if held is not None:
            self.held = None
            if not self.transport.is_closing():
                self.transport.write(held)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.held = None
        self.transport.close()


class _Refused:
    """The request cycle of a refused request, as far as uvicorn's callbacks look: answered whole."""

    response_started = response_complete = disconnected = True
    more_body = False

    def __init__(self) -> None:
        self.message_event = asyncio.Event()


def guarded_protocol(limits: HttpLimits) -> Callable[..., GuardedHttpProtocol]:
    """The `http` protocol for uvicorn.Config: called as uvicorn calls a protocol class."""

    def make(*args: Any, **kwargs: Any) -> GuardedHttpProtocol:
        return GuardedHttpProtocol(*args, limits=limits, **kwargs)

    return make


async def sweep(state: ServerState, limits: HttpLimits) -> None:
    """Until cancelled: end the connections whose request is late."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(limits.sweep_every_s)
        now = loop.time()
        for connection in list(state.connections):
            if isinstance(connection, GuardedHttpProtocol):
                connection.expire(now)


def _error_response(status: int, code: str, message: str) -> bytes:
    body = fastjson.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}})
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nx-request-id: %s\r\nconnection: close\r\n\r\n%s"
            % (status, HTTPStatus(status).phrase.encode(), len(body), new_request_id().encode(), body))


LOG_EVERY_S = 10.0
_logged = {"at": float("-inf"), "unlogged": 0}


def _log_refusal(client: tuple[str, int] | None, message: str) -> None:
    """One line, then at most one every LOG_EVERY_S: a flood of slow clients is not a flood of lines."""
    now = time.monotonic()
    if now - _logged["at"] < LOG_EVERY_S:
        _logged["unlogged"] += 1
        return
    more = f" ({_logged['unlogged']} more since the last such line)" if _logged["unlogged"] else ""
    _logged["at"], _logged["unlogged"] = now, 0
    log.info("closing a connection from %s: %s%s", f"{client[0]}:{client[1]}" if client else "a client", message, more)
