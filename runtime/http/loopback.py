"""`contract.loopback.Loopback` over the stack's own ASGI app, in process.

The request goes through the whole app (request ids, limits, auth, quotas, metrics, logs, the
route), as an HTTP request would, without a socket. Its principal rides in an ASGI extension
(`LOOPBACK`), which only code in this process can put in a scope: the authentication layer takes it
as the request's principal, and quotas, access policies and ownership then apply to it as to any
request of that principal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message

from contract.caller import Principal
from contract.loopback import LOOPBACK, LoopbackAnswer

__all__ = ["AppLoopback"]


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

    async def __call__(self, method: str, path: str, body: bytes | None, principal: Principal | None) -> LoopbackAnswer:
        await self._ready.wait()
        assert self._app is not None
        payload = body or b""
        headers = [(b"host", b"stack.local"), (b"content-length", str(len(payload)).encode())]
        if body is not None:
            headers.append((b"content-type", b"application/json"))
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers, "client": ("127.0.0.1", 0),
            "server": ("stack.local", 80), "extensions": {LOOPBACK: {"principal": principal}},
        }
        sent = False
        answered = asyncio.Event()

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await answered.wait()  # nobody leaves: the request is over when its answer is
            return {"type": "http.disconnect"}

        status, response_headers, parts = 500, {}, []

        async def send(message: Message) -> None:
            nonlocal status, response_headers
            if message["type"] == "http.response.start":
                status = int(message["status"])
                response_headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in message.get("headers", ())}
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if not message.get("more_body", False):
                    answered.set()

        self._own += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._own -= 1
            answered.set()
        return LoopbackAnswer(status, response_headers, b"".join(parts))
