"""`/console` in the server's app, built on its first request: a stack whose console is off, or
whose console nobody opens, imports none of it."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from runtime.console.context import ConsoleContext

__all__ = ["ConsoleGate"]


class ConsoleGate:
    """Sends `/console` and what is under it to the console (made at the first such request); every
    other request on to `app`, at the cost of one prefix test."""

    def __init__(self, app: ASGIApp, context: ConsoleContext) -> None:
        self.app = app
        self.context = context
        self._console: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/console"):
            await self.app(scope, receive, send)
            return
        if self._console is None:
            from runtime.console.app import Console

            self._console = Console(self.context)
        if scope["path"] == "/console":
            scope = {**scope, "path": "/console/", "raw_path": b"/console/"}
        await self._console(scope, receive, send)
