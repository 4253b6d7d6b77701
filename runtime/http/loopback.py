"""`contract.loopback.Loopback` over the stack's own ASGI app, in process.

The request goes through the whole app (request ids, limits, auth, quotas, metrics, logs, the
route), as an HTTP request would, without a socket. Its principal rides in an ASGI extension
(`contract.loopback.LOOPBACK`), which only code in this process can put in a scope: the
authentication layer takes it as the request's principal, and quotas, access policies and
ownership then apply to it as to any request of that principal. The console and the batches both
reach the stores this way only: there is no second path to them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.types import ASGIApp, Message

from contract.caller import Principal
from contract.loopback import LOOPBACK, LoopbackAnswer

__all__ = ["AppLoopback", "StreamedAnswer"]


class StreamedAnswer:
    """An answer whose body comes in parts as the app sends them (a server-sent event stream)."""

    def __init__(self, status: int, headers: Mapping[str, str], parts: AsyncIterator[bytes]) -> None:
        self.status, self.headers, self.parts = status, headers, parts


class AppLoopback:
    """See the module's docstring. `attach` gives it the app once the app is built."""

    def __init__(self) -> None:
        self._app: ASGIApp | None = None
        self._ready = asyncio.Event()
        self._in_flight: Callable[[], int] = lambda: 0
        self._own = 0

    def attach(self, app: ASGIApp, in_flight: Callable[[], int]) -> None:
        """`in_flight`: the requests the app is answering now, its loopback requests among them."""
        self._app, self._in_flight = app, in_flight
        self._ready.set()

    def live(self) -> int:
        return max(0, self._in_flight() - self._own)

    async def __call__(self, method: str, path: str, body: bytes | None, principal: Principal | None,
                       headers: Mapping[str, str] | None = None) -> LoopbackAnswer:
        """The answer, whole. `path` may carry a query string; `headers` (the console's upload's
        content type) go with the request."""
        answer = await self.stream(method, path, body, principal, headers)
        return LoopbackAnswer(answer.status, answer.headers, b"".join([part async for part in answer.parts]))

    async def stream(self, method: str, path: str, body: bytes | None, principal: Principal | None,
                     headers: Mapping[str, str] | None = None) -> StreamedAnswer:
        """The answer's status and headers once the app sends them, and its body as it comes."""
        await self._ready.wait()
        assert self._app is not None
        scope = _scope(method, path, body, principal, headers)
        parts: asyncio.Queue[bytes | None] = asyncio.Queue()
        started: asyncio.Future[tuple[int, dict[str, str]]] = asyncio.get_running_loop().create_future()
        answered = asyncio.Event()
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body or b"", "more_body": False}
            await answered.wait()  # nobody leaves: the request is over when its answer is
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.set_result((int(message["status"]), {name.decode("latin-1").lower(): value.decode("latin-1")
                                                              for name, value in message.get("headers", ())}))
            elif message["type"] == "http.response.body":
                parts.put_nowait(message.get("body", b""))
                if not message.get("more_body", False):
                    answered.set()
                    parts.put_nowait(None)

        async def run() -> None:
            self._own += 1
            try:
                await self._app(scope, receive, send)  # type: ignore[misc]
            finally:
                self._own -= 1
                answered.set()
                parts.put_nowait(None)
                if not started.done():
                    started.set_result((500, {}))

        task = asyncio.create_task(run())
        status, response_headers = await started
        return StreamedAnswer(status, response_headers, _parts(parts, task))


async def _parts(parts: asyncio.Queue[bytes | None], task: asyncio.Task[None]) -> AsyncIterator[bytes]:
    try:
        while (part := await parts.get()) is not None:
            yield part
        await task
    finally:
        if not task.done():  # the reader left before the end: the request goes with it
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _scope(method: str, path: str, body: bytes | None, principal: Principal | None, headers: Mapping[str, str] | None) -> dict[str, Any]:
    route, _, query = path.partition("?")
    raw_headers = [(b"host", b"stack.local"), (b"content-length", str(len(body or b"")).encode())]
    if body is not None and not any(name.lower() == "content-type" for name in headers or {}):
        raw_headers.append((b"content-type", b"application/json"))
    raw_headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in (headers or {}).items()]
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http", "path": route,
            "raw_path": route.encode(), "query_string": query.encode(), "root_path": "", "headers": raw_headers,
            "client": ("127.0.0.1", 0), "server": ("stack.local", 80), "extensions": {LOOPBACK: {"principal": principal}}}
