"""Serving the fake upstream with uvicorn (httptools, uvloop): in a background thread, or as a process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from fake_upstream.app import Faults, RecordedRequest, create_app

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class ReadyServer(uvicorn.Server):
    """A uvicorn server that calls `on_ready` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_ready()


def build_server(app: ASGIApp, on_ready: Callable[[], None]) -> ReadyServer:
    """uvicorn as fast as it goes: httptools, uvloop, no access log, no Server/Date headers."""
    config = uvicorn.Config(
        app,
        http="httptools",
        loop="uvloop",
        lifespan="off",
        access_log=False,
        proxy_headers=False,
        log_config=None,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=1,
    )
    return ReadyServer(config, on_ready)


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port); port 0 picks a free one."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class FakeUpstream:
    """A running fake upstream: where it is, and what it received."""

    host: str
    port: int
    api_key: str | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    """Paths of the answers whose client left before they were whole (a slow answer, a stream)."""
    faults: Faults = field(default_factory=Faults)
    """Switched on and off while it runs: every model call fails, or hangs (`Faults`)."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1)."""
        return f"{self.url}/v1"

    def bodies(self, path: str = "/v1/chat/completions") -> list[Any]:
        """The JSON bodies received at `path`, oldest first."""
        return [request.body for request in self.requests if request.path == path]


@contextmanager
def running_fake_upstream(api_key: str | None = None, host: str = "127.0.0.1") -> Iterator[FakeUpstream]:
    """Serve the fake upstream on a free port in a background thread until the block ends."""
    sock = bind_socket(host, 0)
    upstream = FakeUpstream(host, sock.getsockname()[1], api_key)
    with serving(create_app(api_key, upstream.requests, upstream.abandoned, upstream.faults), sock, "fake-upstream"):
        yield upstream


@contextmanager
def serving(app: ASGIApp, sock: socket.socket, name: str) -> Iterator[None]:
    """Serve an ASGI app on a bound socket in a background thread until the block ends."""
    ready = threading.Event()
    server = build_server(app, ready.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    try:
        _wait_ready(ready, thread)
        yield
    finally:
        server.should_exit = server.force_exit = True
        thread.join(STOP_TIMEOUT_S)
        sock.close()


def _wait_ready(ready: threading.Event, thread: threading.Thread) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.wait(0.01):
        if not thread.is_alive():
            raise RuntimeError("the fake upstream server failed to start")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the fake upstream server did not start within {START_TIMEOUT_S} s")
