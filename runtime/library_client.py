"""The stack in-process: the same ASGI app the server runs, reached by the `openai` SDK without a socket.

    from runtime.library_client import LibraryClient

    with LibraryClient("starter") as stack:
        client = stack.openai()
        print(client.models.list())

Every request goes through the real app (routes, validation, middleware, errors), on the app's
own event loop in a background thread; streams arrive chunk by chunk. `async_openai()` gives an
`openai.AsyncOpenAI` usable from any event loop.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import httpx2

from builder.resolve import StackPlan, load_plan
from runtime.app.stack_app import StackApp, create_app
from runtime.transports.asgi import AsyncThreadedASGITransport, BackgroundLoop, ThreadedASGITransport
from runtime.stack import Stack, open_stack

if TYPE_CHECKING:
    from anthropic import Anthropic, AsyncAnthropic
    from openai import AsyncOpenAI, OpenAI

__all__ = ["BASE_URL", "LibraryClient", "NoWebSocketTransport"]

BASE_URL = "http://stack.local/v1"
"""The URL the in-process clients use; the host is never resolved or connected to."""


class NoWebSocketTransport(RuntimeError):
    """The in-process transport carries HTTP requests only."""


def _no_websocket(*_args: Any, **_kwargs: Any) -> Any:
    # Without this the SDK would try to resolve the made-up host and fail with a bare DNS error.
    raise NoWebSocketTransport(
        "The library client has no WebSocket transport: responses.connect() needs the server (`stack run`, then "
        "ws://host:port/v1/responses). In process, stream with responses.create(stream=True) instead.")


class LibraryClient:
    """A started stack and the clients that reach its app in-process.

    `config` is a distribution name, a path to a run.yaml, or an already resolved plan. Config
    errors raise `builder.errors.ConfigError` from the constructor, as `stack run` reports them.
    """

    def __init__(self, config: str | Path | StackPlan, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.plan = config if isinstance(config, StackPlan) else load_plan(config, env)
        self._loop: BackgroundLoop | None = None
        self._opened: AbstractAsyncContextManager[Stack] | None = None
        self._stack: Stack | None = None
        self._app: StackApp | None = None

    def start(self) -> Self:
        """Start the stack's providers on a background event loop (what `with` does)."""
        if self._loop is not None:
            return self
        loop = BackgroundLoop()
        loop.start()
        opened = open_stack(self.plan)
        try:
            self._stack = loop.run(opened.__aenter__())
        except BaseException:
            loop.stop()
            raise
        self._loop, self._opened = loop, opened
        self._app = create_app(self._stack)
        return self

    def close(self) -> None:
        """Shut the providers down in reverse order and stop the background loop."""
        loop, opened = self._loop, self._opened
        self._loop = self._opened = self._stack = self._app = None
        if loop is None or opened is None:
            return
        try:
            loop.run(opened.__aexit__(None, None, None))
        finally:
            loop.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def app(self) -> StackApp:
        if self._app is None:
            raise RuntimeError("the library client is not started: use `with LibraryClient(...)` or .start()")
        return self._app

    @property
    def stack(self) -> Stack:
        if self._stack is None:
            raise RuntimeError("the library client is not started: use `with LibraryClient(...)` or .start()")
        return self._stack

    def http_client(self) -> httpx2.Client:
        """A sync httpx2 client whose requests go to the app in-process."""
        return httpx2.Client(transport=ThreadedASGITransport(self.app, self._running_loop()), base_url=BASE_URL)

    def async_http_client(self) -> httpx2.AsyncClient:
        """An async httpx2 client whose requests go to the app in-process, from any event loop."""
        return httpx2.AsyncClient(transport=AsyncThreadedASGITransport(self.app, self._running_loop()), base_url=BASE_URL)

    def openai(self, **kwargs: Any) -> OpenAI:
        """An `openai.OpenAI` client over the in-process app; kwargs go to its constructor."""
        import openai

        kwargs.setdefault("api_key", "none")
        client = openai.OpenAI(base_url=BASE_URL, http_client=self.http_client(), **kwargs)
        client.responses.connect = _no_websocket  # type: ignore[method-assign]
        return client

    def async_openai(self, **kwargs: Any) -> AsyncOpenAI:
        """An `openai.AsyncOpenAI` client over the in-process app; kwargs go to its constructor."""
        import openai

        kwargs.setdefault("api_key", "none")
        client = openai.AsyncOpenAI(base_url=BASE_URL, http_client=self.async_http_client(), **kwargs)
        client.responses.connect = _no_websocket  # type: ignore[method-assign]
        return client

    def anthropic(self, **kwargs: Any) -> Anthropic:
        """An `anthropic.Anthropic` client over the in-process app (the Messages API)."""
        import anthropic

        kwargs.setdefault("api_key", "none")
        return anthropic.Anthropic(base_url=BASE_URL.removesuffix("/v1"), http_client=self.http_client(), **kwargs)

    def async_anthropic(self, **kwargs: Any) -> AsyncAnthropic:
        """An `anthropic.AsyncAnthropic` client over the in-process app, from any event loop."""
        import anthropic

        kwargs.setdefault("api_key", "none")
        return anthropic.AsyncAnthropic(base_url=BASE_URL.removesuffix("/v1"), http_client=self.async_http_client(), **kwargs)

    def _running_loop(self) -> BackgroundLoop:
        if self._loop is None:
            raise RuntimeError("the library client is not started: use `with LibraryClient(...)` or .start()")
        return self._loop
