"""Real MCP servers for tests and benchmarks, built with the `mcp` SDK and served by uvicorn.

`running_mcp_servers()` serves, each on a port of its own in a background thread:

    open     Streamable HTTP at /mcp
    private  Streamable HTTP at /mcp, 401 unless `Authorization: Bearer <TOKEN>`
    sse      the older HTTP+SSE transport at /sse (messages at /messages/)
    events   the same at /events: a URL that does not say it is SSE
    hanging  accepts connections and never answers
and the URL of a port where nothing listens (`unreachable`).

Their tools answer deterministically (model answers that quote them can be recorded):

    echo(text)            "echo: <text>" (read-only)
    weather(city)         structured content {"city", "temp_c"}
    picture()             a PNG image
    notes()               text, an embedded text resource, and a resource link
    fail(reason)          an error result (is_error), with the reason
    meet(name)            waits until `PARTY` calls of meet are running together: "<name> met N"
                          (or "<name> waited alone" after 10 s): proves calls run concurrently
    sleep(seconds)        answers after that long
    hang()                never answers
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import EmbeddedResource, ResourceLink, TextContent, TextResourceContents, ToolAnnotations
from pydantic import BaseModel
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PARTY", "PNG", "TOKEN", "McpServers", "build_server", "running_mcp_servers"]

TOKEN = "test-token"
PARTY = 2
# A 1x1 transparent PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
START_TIMEOUT_S = 10.0


class Weather(BaseModel):
    city: str
    temp_c: float


def build_server(name: str = "stack-test") -> MCPServer:
    mcp = MCPServer(name, version="1.0", log_level="WARNING")
    arrivals: dict[str, Any] = {"count": 0, "event": None}

    @mcp.tool(title="Echo", annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo: {text}"

    @mcp.tool()
    def weather(city: str) -> Weather:
        """Today's weather in a city."""
        return Weather(city=city, temp_c=21.5)

    @mcp.tool()
    def picture() -> Image:
        """A small picture."""
        return Image(data=PNG, format="png")

    @mcp.tool()
    def notes() -> list[Any]:
        """Notes, with a document and a link."""
        return [
            TextContent(type="text", text="Meeting notes:"),
            EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///notes.txt", mime_type="text/plain",
                                                                            text="Ship on Friday.")),
            ResourceLink(type="resource_link", uri="file:///agenda.txt", name="agenda"),
        ]

    @mcp.tool()
    def fail(reason: str) -> str:
        """Always fails, with the reason given."""
        raise ToolError(reason)

    @mcp.tool()
    async def meet(name: str) -> str:
        """Waits for a party to gather."""
        if arrivals["event"] is None or arrivals["event"].is_set():
            arrivals["count"], arrivals["event"] = 0, asyncio.Event()
        event = arrivals["event"]
        arrivals["count"] += 1
        if arrivals["count"] >= PARTY:
            event.set()
        try:
            await asyncio.wait_for(event.wait(), 10)
        except TimeoutError:
            return f"{name} waited alone"
        return f"{name} met {PARTY}"

    @mcp.tool()
    async def sleep(seconds: float) -> str:
        """Answers after `seconds`."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.tool()
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(3600)
        return "never"

    return mcp


class BearerGuard:
    """401 unless the request carries `Authorization: Bearer <token>` (lifespan passes through)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {self.token}".encode():
            response = PlainTextResponse("unauthorized", status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


@dataclass
class McpServers:
    open: str
    private: str
    sse: str
    events: str
    hanging: str
    unreachable: str


def _free_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _serve(app: ASGIApp) -> tuple[uvicorn.Server, threading.Thread, int]:
    sock = _free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="fake-mcp", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("a test MCP server failed to start")
        time.sleep(0.01)
    return server, thread, sock.getsockname()[1]


class _Silent:
    """A TCP server that accepts connections and never answers (an MCP server that hangs)."""

    def __init__(self) -> None:
        self.sock = _free_socket()
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, name="fake-mcp-silent", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stopping.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                continue

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(2)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


@contextmanager
def running_mcp_servers() -> Iterator[McpServers]:
    """The test MCP servers, until the block ends."""
    served = [
        _serve(build_server("open").streamable_http_app()),
        _serve(BearerGuard(build_server("private").streamable_http_app(), TOKEN)),
        _serve(build_server("sse").sse_app()),
        _serve(build_server("events").sse_app(sse_path="/events")),
    ]
    silent = _Silent()
    dead = _free_socket()
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    (_, _, open_port), (_, _, private_port), (_, _, sse_port), (_, _, events_port) = served
    try:
        yield McpServers(
            open=f"http://127.0.0.1:{open_port}/mcp", private=f"http://127.0.0.1:{private_port}/mcp",
            sse=f"http://127.0.0.1:{sse_port}/sse", events=f"http://127.0.0.1:{events_port}/events", hanging=f"http://127.0.0.1:{silent.port}/mcp",
            unreachable=f"http://127.0.0.1:{dead_port}/mcp",
        )
    finally:
        for server, _, _ in served:
            server.should_exit = True
        for _, thread, _ in served:
            thread.join(5)
        silent.close()
