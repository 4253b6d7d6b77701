"""The sync and async httpx2 transports over the background loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx2

from runtime.transports.asgi.exchange import ASGIApp, Dispatcher, Exchange, Failure, Item, LoopPipe, Start, ThreadPipe
from runtime.transports.asgi.loop import BackgroundLoop

__all__ = ["AsyncThreadedASGITransport", "ThreadedASGITransport"]


def _read_timeout(request: httpx2.Request) -> float | None:
    timeouts = request.extensions.get("timeout") or {}
    read = timeouts.get("read")
    return None if read is None else float(read)


def _response(request: httpx2.Request, first: Item, stream: httpx2.SyncByteStream | httpx2.AsyncByteStream) -> httpx2.Response:
    if isinstance(first, Start):
        return httpx2.Response(first.status, headers=first.headers, stream=stream, request=request)
    if isinstance(first, Failure) and isinstance(first.error, Exception) and not isinstance(first.error, asyncio.CancelledError):
        # An error escaping the app before it responded is a bug in the app: surface it as is.
        raise first.error
    raise _read_error(request, first)


def _chunk(request: httpx2.Request, item: Item) -> bytes | None:
    """The chunk in `item`, None at the end of the body; raise if the app failed."""
    if item is None or isinstance(item, bytes):
        return item
    raise _read_error(request, item)


def _read_error(request: httpx2.Request, item: Item) -> httpx2.ReadError:
    cause = item.error if isinstance(item, Failure) else None
    error = httpx2.ReadError(f"ASGI app did not complete its response: {cause!r}", request=request)
    error.__cause__ = cause
    return error


def _read_timeout_error(request: httpx2.Request) -> httpx2.ReadTimeout:
    return httpx2.ReadTimeout("timed out waiting for the ASGI app", request=request)


# --- sync transport ----------------------------------------------------------


class _SyncStream(httpx2.SyncByteStream):
    def __init__(self, request: httpx2.Request, pipe: ThreadPipe, exchange: Exchange, dispatcher: Dispatcher) -> None:
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

    def next_item(self) -> Item:
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
        self._dispatcher = Dispatcher(app, loop, client)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._dispatcher.loop.in_loop_thread():
            raise RuntimeError("ThreadedASGITransport used from its own BackgroundLoop thread would deadlock")
        pipe = ThreadPipe(self._dispatcher.loop)
        exchange = self._dispatcher.open(request, request.read(), pipe)
        stream = _SyncStream(request, pipe, exchange, self._dispatcher)
        first = stream.next_item()
        return _response(request, first, stream)


# --- async transport ---------------------------------------------------------


class _AsyncStream(httpx2.AsyncByteStream):
    def __init__(self, request: httpx2.Request, pipe: LoopPipe, exchange: Exchange, dispatcher: Dispatcher) -> None:
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

    async def next_item(self) -> Item:
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
        self._dispatcher = Dispatcher(app, loop, client)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        pipe = LoopPipe(self._dispatcher.loop)
        exchange = self._dispatcher.open(request, body, pipe)
        stream = _AsyncStream(request, pipe, exchange, self._dispatcher)
        first = await stream.next_item()
        return _response(request, first, stream)
