"""In-process httpx2 transports that stream responses from an ASGI app.

The app and everything it owns (DB connections, upstream HTTP clients) live on
one dedicated event loop in a background thread (`BackgroundLoop`). The sync
and async transports marshal each request onto that loop, so loop-bound
resources stay valid whatever thread or loop the caller uses. Responses are
returned as soon as the app sends `http.response.start`; body chunks are handed
over one by one through a bounded pipe, so server-sent events arrive
incrementally.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, MutableMapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypeAlias, TypeVar, TypeVarTuple, Unpack

import httpx2

__all__ = [
    "ASGIApp",
    "AsyncThreadedASGITransport",
    "BackgroundLoop",
    "ThreadedASGITransport",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger(__name__)

# Chunks in flight between the app and the reader before the app's send() waits.
_MAX_PENDING_CHUNKS: Final = 16


class BackgroundLoop:
    """An asyncio event loop running in a daemon thread.

    Single use: `start()` is idempotent, `stop()` cancels whatever is still
    running on the loop, closes it and joins the thread; a stopped loop cannot
    be restarted.
    """

    def __init__(self, name: str = "stack-asgi-loop") -> None:
        self._name = name
        # Guards the accepting flag together with scheduling, so nothing can be
        # queued behind the loop's stop callback and silently never run.
        self._lock = threading.Lock()
        self._accepting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("BackgroundLoop has not been started")
        return self._loop

    def start(self) -> None:
        with self._lock:
            if self._loop is not None:
                if not self._accepting:
                    raise RuntimeError("a stopped BackgroundLoop cannot be restarted")
                return
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_serve_forever, args=(loop,), name=self._name, daemon=True)
            self._loop, self._thread, self._accepting = loop, thread, True
            thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, loop = self._thread, self._loop
            if self._accepting and loop is not None:
                self._accepting = False
                loop.call_soon_threadsafe(loop.stop)
        # A stop requested from the loop's own thread cannot wait for itself.
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def in_loop_thread(self) -> bool:
        """Whether the caller is running on this loop's thread."""
        return self._thread is threading.current_thread()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if not self._accepting or self._loop is None:
                coro.close()
                raise RuntimeError("BackgroundLoop is not running")
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and block until it finishes; cancel it on timeout."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("BackgroundLoop.run() called from the loop's own thread would deadlock")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def call_soon_threadsafe(self, callback: Callable[[Unpack[Ts]], object], *args: Unpack[Ts]) -> bool:
        """Schedule `callback(*args)` on the loop; False if the loop is not running."""
        with self._lock:
            if not self._accepting or self._loop is None:
                return False
            self._loop.call_soon_threadsafe(callback, *args)
            return True

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        _cancel_remaining_tasks(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    # Cancelled tasks may spawn cleanup tasks of their own, hence the loop.
    while tasks := asyncio.all_tasks(loop):
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


# --- items handed from the app to the reader ---------------------------------


@dataclass(frozen=True, slots=True)
class _Start:
    status: int
    headers: list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class _Failure:
    error: BaseException


# bytes: a body chunk; None: the response body is complete.
_Item: TypeAlias = bytes | _Start | _Failure | None


class _Pipe(ABC):
    """Bounded single-producer, single-consumer hand-off of response items.

    The producer is the app on the background loop; the consumer is a thread
    (`_ThreadPipe`) or a task on another event loop (`_LoopPipe`). Only body
    chunks count towards the bound; the consumer acknowledges each one, and
    only wakes the producer when it is actually waiting for room.
    """

    def __init__(self, owner: BackgroundLoop) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self._pending = 0
        self._room: asyncio.Future[None] | None = None

    @abstractmethod
    def put_nowait(self, item: _Item) -> bool:
        """Hand `item` to the consumer at once; False if the consumer is gone."""

    async def put(self, chunk: bytes) -> bool:
        """Deliver a chunk, then wait while the consumer is too far behind."""
        room: asyncio.Future[None] | None = None
        with self._lock:
            self._pending += 1
            if self._pending >= _MAX_PENDING_CHUNKS:
                room = self._room = asyncio.get_running_loop().create_future()
        if not self.put_nowait(chunk):
            return False
        if room is not None:
            await room
        return True

    def _taken(self, item: _Item) -> None:
        if not isinstance(item, bytes):
            return
        with self._lock:
            self._pending -= 1
            room, self._room = self._room, None
        if room is not None:
            self._owner.call_soon_threadsafe(_resolve, room)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _ThreadPipe(_Pipe):
    """Pipe whose consumer is a blocking thread."""

    def __init__(self, owner: BackgroundLoop) -> None:
        super().__init__(owner)
        self._items: queue.SimpleQueue[_Item] = queue.SimpleQueue()

    def put_nowait(self, item: _Item) -> bool:
        self._items.put(item)
        return True

    def get(self, timeout: float | None) -> _Item:
        """Block for the next item; raise TimeoutError after `timeout` seconds."""
        try:
            item = self._items.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        self._taken(item)
        return item


class _LoopPipe(_Pipe):
    """Pipe whose consumer is a task on the event loop that created the pipe."""

    def __init__(self, owner: BackgroundLoop) -> None:
        super().__init__(owner)
        self._consumer_loop = asyncio.get_running_loop()
        self._items: asyncio.Queue[_Item] = asyncio.Queue()

    def put_nowait(self, item: _Item) -> bool:
        try:
            self._consumer_loop.call_soon_threadsafe(self._items.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed
            return False
        return True

    async def get(self, timeout: float | None) -> _Item:
        """Wait for the next item; raise TimeoutError after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            item = await self._items.get()
        self._taken(item)
        return item


# --- one request/response cycle on the background loop -----------------------


class _Exchange:
    """Runs the app for one request on the background loop and feeds a pipe.

    Every method except the constructor runs on the background loop.
    """

    def __init__(self, app: ASGIApp, scope: Scope, body: bytes, pipe: _Pipe, tasks: set[asyncio.Task[None]]) -> None:
        self._app = app
        self._scope = scope
        self._body: bytes | None = body
        self._pipe = pipe
        self._tasks = tasks
        self._is_head = scope["method"] == "HEAD"
        self._disconnect = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._complete = False
        self._closed = False

    def start(self) -> None:
        if self._closed:  # the caller gave up before the app was scheduled
            return
        self._task = asyncio.get_running_loop().create_task(self._run_app())
        # The loop only keeps weak references to tasks.
        self._tasks.add(self._task)
        self._task.add_done_callback(self._app_done)

    def close(self) -> None:
        """The reader went away: report a disconnect and abandon an unfinished response."""
        self._closed = True
        self._disconnect.set()
        if self._task is not None and not self._complete:
            self._task.cancel()

    async def _run_app(self) -> None:
        await self._app(self._scope, self._receive, self._send)

    async def _receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        # Like a real server: nothing more arrives until the client goes away,
        # which for us is when the response is done or the reader closed it.
        await self._disconnect.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        if self._closed:  # a server drops output for a client that has left
            return
        kind = message["type"]
        if kind == "http.response.start" and not self._started:
            self._started = True
            headers = [(bytes(name), bytes(value)) for name, value in message.get("headers", ())]
            self._deliver(_Start(int(message["status"]), headers))
        elif kind == "http.response.body" and self._started and not self._complete:
            await self._send_body(bytes(message.get("body", b"")), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} at this point of the response")

    async def _send_body(self, body: bytes, more_body: bool) -> None:
        if body and not self._is_head and not await self._pipe.put(body):
            self.close()
            return
        if not more_body:
            self._complete = True
            self._disconnect.set()
            self._deliver(None)

    def _deliver(self, item: _Item) -> None:
        if not self._pipe.put_nowait(item):
            self.close()

    def _app_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._disconnect.set()
        error = _task_error(task)
        if self._complete:
            if error is not None and not task.cancelled():
                # Work after the response (e.g. background tasks) has nobody to tell.
                logger.error("ASGI app failed after completing its response", exc_info=error)
        elif not self._closed:
            self._deliver(_Failure(error or RuntimeError("ASGI app returned without completing its response")))


def _task_error(task: asyncio.Task[None]) -> BaseException | None:
    if task.cancelled():
        return asyncio.CancelledError("ASGI app was cancelled")
    return task.exception()


# --- shared request handling -------------------------------------------------


class _Dispatcher:
    """What both transports share: building the scope and starting exchanges."""

    def __init__(self, app: ASGIApp, loop: BackgroundLoop, client: tuple[str, int]) -> None:
        self.app = app
        self.loop = loop
        self.client = client
        # Touched only on the background loop.
        self.tasks: set[asyncio.Task[None]] = set()

    def open(self, request: httpx2.Request, body: bytes, pipe: _Pipe) -> _Exchange:
        exchange = _Exchange(self.app, _scope(request, self.client), body, pipe, self.tasks)
        if not self.loop.call_soon_threadsafe(exchange.start):
            raise RuntimeError("BackgroundLoop is not running")
        return exchange

    def close(self, exchange: _Exchange) -> None:
        self.loop.call_soon_threadsafe(exchange.close)


def _scope(request: httpx2.Request, client: tuple[str, int]) -> Scope:
    url = request.url
    port = url.port if url.port is not None else (443 if url.scheme == "https" else 80)
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "headers": [(name.lower(), value) for name, value in request.headers.raw],
        "scheme": url.scheme,
        "path": url.path,
        "raw_path": url.raw_path.split(b"?", 1)[0],
        "query_string": url.query,
        "server": (url.host, port),
        "client": client,
        "root_path": "",
    }


def _read_timeout(request: httpx2.Request) -> float | None:
    timeouts = request.extensions.get("timeout") or {}
    read = timeouts.get("read")
    return None if read is None else float(read)


def _response(request: httpx2.Request, first: _Item, stream: httpx2.SyncByteStream | httpx2.AsyncByteStream) -> httpx2.Response:
    if isinstance(first, _Start):
        return httpx2.Response(first.status, headers=first.headers, stream=stream, request=request)
    if isinstance(first, _Failure) and isinstance(first.error, Exception) and not isinstance(first.error, asyncio.CancelledError):
        # An error escaping the app before it responded is a bug in the app: surface it as is.
        raise first.error
    raise _read_error(request, first)


def _chunk(request: httpx2.Request, item: _Item) -> bytes | None:
    """The chunk in `item`, None at the end of the body; raise if the app failed."""
    if item is None or isinstance(item, bytes):
        return item
    raise _read_error(request, item)


def _read_error(request: httpx2.Request, item: _Item) -> httpx2.ReadError:
    cause = item.error if isinstance(item, _Failure) else None
    error = httpx2.ReadError(f"ASGI app did not complete its response: {cause!r}", request=request)
    error.__cause__ = cause
    return error


def _read_timeout_error(request: httpx2.Request) -> httpx2.ReadTimeout:
    return httpx2.ReadTimeout("timed out waiting for the ASGI app", request=request)


# --- sync transport ----------------------------------------------------------


class _SyncStream(httpx2.SyncByteStream):
    def __init__(self, request: httpx2.Request, pipe: _ThreadPipe, exchange: _Exchange, dispatcher: _Dispatcher) -> None:
        self._request = request
        self._pipe = pipe
        self._exchange = exchange
        self._dispatcher = dispatcher
        self._timeout = _read_timeout(request)
        self._finished = False

    def __iter__(self) -> Iterator[bytes]:
        while not self._finished:
            chunk = _chunk(self._request, self.next_item())
            if chunk is None:
                self._finished = True
                return
            yield chunk

    def next_item(self) -> _Item:
        try:
            return self._pipe.get(self._timeout)
        except TimeoutError:
            self.close()
            raise _read_timeout_error(self._request) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            self._dispatcher.close(self._exchange)


class ThreadedASGITransport(httpx2.BaseTransport):
    """Sync transport serving an ASGI app that runs on a `BackgroundLoop`.

    For `httpx2.Client` (and `openai.OpenAI`). Blocks the calling thread, so it
    must not be used from the background loop's own thread.
    """

    def __init__(self, app: ASGIApp, loop: BackgroundLoop, client: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self._dispatcher = _Dispatcher(app, loop, client)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._dispatcher.loop.in_loop_thread():
            raise RuntimeError("ThreadedASGITransport used from its own BackgroundLoop thread would deadlock")
        pipe = _ThreadPipe(self._dispatcher.loop)
        exchange = self._dispatcher.open(request, request.read(), pipe)
        stream = _SyncStream(request, pipe, exchange, self._dispatcher)
        first = stream.next_item()
        return _response(request, first, stream)


# --- async transport ---------------------------------------------------------


class _AsyncStream(httpx2.AsyncByteStream):
    def __init__(self, request: httpx2.Request, pipe: _LoopPipe, exchange: _Exchange, dispatcher: _Dispatcher) -> None:
        self._request = request
        self._pipe = pipe
        self._exchange = exchange
        self._dispatcher = dispatcher
        self._timeout = _read_timeout(request)
        self._finished = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._finished:
            chunk = _chunk(self._request, await self.next_item())
            if chunk is None:
                self._finished = True
                return
            yield chunk

    async def next_item(self) -> _Item:
        try:
            return await self._pipe.get(self._timeout)
        except TimeoutError:
            self._close()
            raise _read_timeout_error(self._request) from None
        except BaseException:
            self._close()
            raise

    def _close(self) -> None:
        if not self._finished:
            self._finished = True
            self._dispatcher.close(self._exchange)

    async def aclose(self) -> None:
        self._close()


class AsyncThreadedASGITransport(httpx2.AsyncBaseTransport):
    """Async transport serving an ASGI app that runs on a `BackgroundLoop`.

    For `httpx2.AsyncClient` (and `openai.AsyncOpenAI`); usable from any event
    loop in any thread, including the background loop itself.
    """

    def __init__(self, app: ASGIApp, loop: BackgroundLoop, client: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self._dispatcher = _Dispatcher(app, loop, client)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        pipe = _LoopPipe(self._dispatcher.loop)
        exchange = self._dispatcher.open(request, body, pipe)
        stream = _AsyncStream(request, pipe, exchange, self._dispatcher)
        first = await stream.next_item()
        return _response(request, first, stream)
