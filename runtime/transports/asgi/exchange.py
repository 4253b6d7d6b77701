"""One request/response cycle of the app on the background loop, and the bounded pipe that hands
the response over to the caller's thread or event loop."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import httpx2

from runtime.transports.asgi.loop import BackgroundLoop

__all__ = ["ASGIApp", "Dispatcher", "Exchange", "Failure", "Item", "LoopPipe", "Message", "Receive", "Scope", "Send", "Start", "ThreadPipe"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger(__name__)

# Chunks in flight between the app and the reader before the app's send() waits.
_MAX_PENDING_CHUNKS: Final = 16


# --- items handed from the app to the reader ---------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    status: int
    headers: list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Failure:
    error: BaseException


# bytes: a body chunk; None: the response body is complete.
Item: TypeAlias = bytes | Start | Failure | None


class Pipe(ABC):
    """Bounded single-producer, single-consumer hand-off of response items.

    The producer is the app on the background loop; the consumer is a thread
    (`ThreadPipe`) or a task on another event loop (`LoopPipe`). Only body
    chunks count towards the bound; the consumer acknowledges each one, and
    only wakes the producer when it is actually waiting for room.
    """

    def __init__(self, owner: BackgroundLoop) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self._pending = 0
        self._room: asyncio.Future[None] | None = None

    @abstractmethod
    def put_nowait(self, item: Item) -> bool:
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

    def _taken(self, item: Item) -> None:
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


class ThreadPipe(Pipe):
    """Pipe whose consumer is a blocking thread."""

    def __init__(self, owner: BackgroundLoop) -> None:
        super().__init__(owner)
        self._items: queue.SimpleQueue[Item] = queue.SimpleQueue()

    def put_nowait(self, item: Item) -> bool:
        self._items.put(item)
        return True

    def get(self, timeout: float | None) -> Item:
        """Block for the next item; raise TimeoutError after `timeout` seconds."""
        try:
            item = self._items.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        self._taken(item)
        return item


class LoopPipe(Pipe):
    """Pipe whose consumer is a task on the event loop that created the pipe."""

    def __init__(self, owner: BackgroundLoop) -> None:
        super().__init__(owner)
        self._consumer_loop = asyncio.get_running_loop()
        self._items: asyncio.Queue[Item] = asyncio.Queue()

    def put_nowait(self, item: Item) -> bool:
        try:
            self._consumer_loop.call_soon_threadsafe(self._items.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed
            return False
        return True

    async def get(self, timeout: float | None) -> Item:
        """Wait for the next item; raise TimeoutError after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            item = await self._items.get()
        self._taken(item)
        return item


# --- one request/response cycle on the background loop -----------------------


class Exchange:
    """Runs the app for one request on the background loop and feeds a pipe.

    Every method except the constructor runs on the background loop.
    """

    def __init__(self, app: ASGIApp, scope: Scope, body: bytes, pipe: Pipe, tasks: set[asyncio.Task[None]]) -> None:
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
            self._deliver(Start(int(message["status"]), headers))
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

    def _deliver(self, item: Item) -> None:
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
            self._deliver(Failure(error or RuntimeError("ASGI app returned without completing its response")))


def _task_error(task: asyncio.Task[None]) -> BaseException | None:
    if task.cancelled():
        return asyncio.CancelledError("ASGI app was cancelled")
    return task.exception()


# --- shared request handling -------------------------------------------------


class Dispatcher:
    """What both transports share: building the scope and starting exchanges."""

    def __init__(self, app: ASGIApp, loop: BackgroundLoop, client: tuple[str, int]) -> None:
        self.app = app
        self.loop = loop
        self.client = client
        # Touched only on the background loop.
        self.tasks: set[asyncio.Task[None]] = set()

    def open(self, request: httpx2.Request, body: bytes, pipe: Pipe) -> Exchange:
        exchange = Exchange(self.app, _scope(request, self.client), body, pipe, self.tasks)
        if not self.loop.call_soon_threadsafe(exchange.start):
            raise RuntimeError("BackgroundLoop is not running")
        return exchange

    def close(self, exchange: Exchange) -> None:
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
