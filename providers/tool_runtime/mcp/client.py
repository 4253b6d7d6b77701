"""Connections to MCP servers, through the `mcp` SDK over the stack's HTTP transport.

Every byte goes through the transport the stack made for this provider (`ProviderContext.
http_transport`), so MCP traffic is recorded and replayed like model traffic and, for URLs taken
from requests, every address dialled is checked by the network guard.

Both transports of the SDK are used: Streamable HTTP, and the older HTTP+SSE for URLs whose path
ends in `/sse` (or when a Streamable HTTP POST is refused with 404/405: such servers speak only
SSE). The SDK's `auto` mode probes for the 2026 protocol and falls back to the initialize
handshake; which one a server speaks is remembered for a while, so that later connections to it
skip the probe.

The SDK's transports run in anyio task groups, which must be entered and left by one task: each
`Connection` is held open by a task of its own, and calls from any task go through it. Connections
are pooled by server and credentials (`ConnectionPool`): a response reuses the session an earlier
one opened, with its HTTP keep-alive connections and the SDK's caches, instead of paying a session
set-up per response; one session carries concurrent calls (JSON-RPC multiplexes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from providers.tool_runtime.mcp.endpoint import CONNECTION_FAILED, Endpoint, McpFailure

__all__ = ["Connection", "ConnectionPool", "Endpoint", "McpFailure", "ProtocolMemory", "SharedTransport"]

log = logging.getLogger("stack")

PROTOCOL_MEMORY_S = 300.0
CLOSE_TIMEOUT_S = 5.0


class SharedTransport(httpx2.AsyncBaseTransport):
    """One transport under many short-lived clients: closing a client must not close it."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        pass


@dataclass
class _Known:
    sse: bool
    mode: str
    discover: Any
    until: float


@dataclass
class ProtocolMemory:
    """How each server was last reached (transport, protocol), for a while."""

    entries: dict[str, _Known] = field(default_factory=dict)

    def get(self, endpoint: Endpoint) -> _Known | None:
        known = self.entries.get(endpoint.url)
        return known if known is not None and known.until > time.monotonic() else None

    def remember(self, endpoint: Endpoint, sse: bool, client: Any) -> None:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        version = client.protocol_version
        modern = version in MODERN_PROTOCOL_VERSIONS and client.session.discover_result is not None
        mode = version if modern else "legacy"
        self.entries[endpoint.url] = _Known(sse, mode, client.session.discover_result if modern else None,
                                            time.monotonic() + PROTOCOL_MEMORY_S)

    def forget(self, endpoint: Endpoint) -> None:
        self.entries.pop(endpoint.url, None)


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stack")
    except PackageNotFoundError:
        return "0.0.0+unknown"


@dataclass(frozen=True)
class Timeouts:
    connect_s: float
    list_s: float
    call_s: float


class Connection:
    """A client session with one MCP server, opened on first use and held by a task of its own."""

    def __init__(self, endpoint: Endpoint, transport: httpx2.AsyncBaseTransport, timeouts: Timeouts, memory: ProtocolMemory) -> None:
        self.endpoint = endpoint
        self._transport = transport
        self._timeouts = timeouts
        self._memory = memory
        self._lock = asyncio.Lock()
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._statuses: list[int] = []
        self.last_used = time.monotonic()
        self.busy = 0
        """Calls and listings under way: a busy connection is never closed as idle."""

    @property
    def usable(self) -> bool:
        """Not closed, and its session (if opened) still held: a dead one is replaced, not reused."""
        return not self._closing.is_set() and (self._owner is None or not self._owner.done())

    async def list_tools(self) -> list[Any]:
        """Every tool the server lists (all pages)."""
        async with self._in_use(), self._guarded(self._timeouts.list_s, "list its tools"):
            client = await self._open()
            tools: list[Any] = []
            cursor: str | None = None
            for _ in range(100):  # a server that pages forever must not hang the response
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """The tool's `CallToolResult` (an `is_error` result is a result, not a failure)."""
        async with self._in_use():
            client = await self._open_within(self._timeouts.list_s)
            async with self._guarded(self._timeouts.call_s + 5.0, f"answer the call of {name!r}"):
                return await client.call_tool(name, dict(arguments), read_timeout_seconds=self._timeouts.call_s)

    @contextlib.asynccontextmanager
    async def _in_use(self) -> AsyncIterator[None]:
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.last_used = time.monotonic()

    async def _open_within(self, timeout_s: float) -> Any:
        async with self._guarded(timeout_s, "open a session"):
            return await self._open()

    async def _open(self) -> Any:
        async with self._lock:
            if self._client is None:
                ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self._owner = asyncio.get_running_loop().create_task(self._hold(ready))
                self._client = await ready
            return self._client

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        """Open the session and keep it until `aclose`; the SDK's contexts live in this task."""
        known = self._memory.get(self.endpoint)
        sse = known.sse if known is not None else self.endpoint.sse
        try:
            try:
                await self._serve(ready, sse, known)
            except BaseException:
                if ready.done() or known is not None or sse or self._refused_post() is None:
                    raise
                # A 404/405 for the first POST: a server that speaks only the older SSE transport.
                self._statuses.clear()
                await self._serve(ready, True, None)
        except BaseException as error:  # noqa: BLE001 - reported to whoever waits for the session
            self._memory.forget(self.endpoint)
            if not ready.done():
                ready.set_exception(self.failure(error))
            elif not isinstance(error, asyncio.CancelledError):
                log.debug("MCP session with %s ended: %s", self.endpoint.label, self.failure(error).message)

    async def _serve(self, ready: asyncio.Future[Any], sse: bool, known: _Known | None) -> None:
        from mcp import Client
        from mcp_types import Implementation

        mode, discover = (known.mode, known.discover) if known is not None else ("auto", None)
        async with contextlib.AsyncExitStack() as stack:
            transport = self._sse_transport() if sse else await self._http_transport(stack)
            client = await stack.enter_async_context(Client(
                transport, mode=mode, prior_discover=discover, read_timeout_seconds=self._timeouts.call_s, cache=None,
                client_info=Implementation(name="stack", version=_version()),
            ))
            self._memory.remember(self.endpoint, sse, client)
            ready.set_result(client)
            await self._closing.wait()

    async def _http_transport(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(self._http_client())
        return streamable_http_client(self.endpoint.url, http_client=http)

    def _sse_transport(self) -> Any:
        from mcp.client.sse import sse_client

        def factory(headers: Mapping[str, str] | None = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
            return self._http_client(dict(headers or {}), auth)

        return sse_client(self.endpoint.url, timeout=self._timeouts.connect_s, sse_read_timeout=self._read_timeout(),
                          httpx_client_factory=factory)

    def _http_client(self, extra_headers: Mapping[str, str] | None = None, auth: Any = None) -> httpx2.AsyncClient:
        async def note_status(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                self._statuses.append(response.status_code)
            if response.status_code in (401, 403):
                await response.aread()
                response.raise_for_status()  # a credentials problem, named as such

        return httpx2.AsyncClient(
            transport=self._transport, headers={**dict(self.endpoint.headers), **dict(extra_headers or {})}, auth=auth,
            timeout=httpx2.Timeout(self._read_timeout(), connect=self._timeouts.connect_s),
            event_hooks={"response": [note_status]},
        )

    def _read_timeout(self) -> float:
        # Longer than the MCP-level timeouts, which fire first and leave the session usable.
        return max(self._timeouts.call_s, self._timeouts.list_s) + 10.0

    def _refused_post(self) -> int | None:
        return next((status for status in self._statuses if status in (404, 405)), None)

    @contextlib.asynccontextmanager
    async def _guarded(self, timeout_s: float, what: str) -> AsyncIterator[None]:
        """Failures as `McpFailure`; no wait longer than `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                yield
        except McpFailure:
            raise
        except TimeoutError:
            raise McpFailure({"type": "mcp_protocol_error", "code": -32001,
                              "message": f"MCP server '{self.endpoint.label}' did not {what} within {timeout_s:.0f} s."}) from None
        except Exception as error:
            raise self.failure(error) from None

    def failure(self, error: BaseException) -> McpFailure:
        """Any exception from the SDK or the transport, as an item error naming the server."""
        from mcp import MCPError

        label = self.endpoint.label
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]
        if isinstance(error, McpFailure):
            return error
        if isinstance(error, httpx2.HTTPStatusError):
            status = error.response.status_code
            return McpFailure({"type": "http_error", "code": status, "message": f"MCP server '{label}' answered HTTP {status}."})
        if isinstance(error, (httpx2.TimeoutException, TimeoutError)):
            return McpFailure({"type": "mcp_protocol_error", "code": -32001, "message": f"MCP server '{label}' did not answer in time."})
        if isinstance(error, httpx2.TransportError):
            detail = f"Could not reach MCP server '{label}': {error}"
            return McpFailure({"type": "http_error", "code": CONNECTION_FAILED, "message": detail}, detail)
        if isinstance(error, MCPError):
            if self._statuses and error.code in (-32603, -32000):  # the SDK's words for an HTTP error: name the status
                answered = self._statuses[-1]
                return McpFailure({"type": "http_error", "code": answered, "message": f"MCP server '{label}' answered HTTP {answered}."})
            return McpFailure({"type": "mcp_protocol_error", "code": int(error.code), "message": f"MCP server '{label}': {error.message}"})
        return McpFailure({"type": "mcp_protocol_error", "code": -32603,
                           "message": f"MCP server '{label}' could not be used: {type(error).__name__}: {error}"})

    async def aclose(self) -> None:
        owner = self._owner
        self._closing.set()
        if owner is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(owner), CLOSE_TIMEOUT_S)
        except (TimeoutError, asyncio.CancelledError):
            owner.cancel()


class ConnectionPool:
    """Open connections by server and credentials (`Endpoint.key`), most recently used last; one
    idle for `idle_s` or past `max_size` is closed."""

    def __init__(self, connect: Callable[[Endpoint], Connection], idle_s: float, max_size: int = 256) -> None:
        self._connect = connect
        self._idle_s = idle_s
        self._max_size = max_size
        self._connections: OrderedDict[str, Connection] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, endpoint: Endpoint) -> Connection:
        self._expire()
        connection = self._connections.get(endpoint.key)
        if connection is not None and connection.usable:
            self._connections.move_to_end(endpoint.key)
            return connection
        if connection is not None:
            self._close(connection)
        connection = self._connections[endpoint.key] = self._connect(endpoint)
        while len(self._connections) > self._max_size:
            self._close(self._connections.popitem(last=False)[1])
        return connection

    def _expire(self) -> None:
        cutoff = time.monotonic() - self._idle_s
        for key, connection in list(self._connections.items()):
            if connection.last_used > cutoff:
                return  # the rest were used later
            if not connection.busy:
                del self._connections[key]
                self._close(connection)

    def _close(self, connection: Connection) -> None:
        task = asyncio.get_running_loop().create_task(connection.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        connections, self._connections = list(self._connections.values()), OrderedDict()
        await asyncio.gather(*(connection.aclose() for connection in connections), *self._closing, return_exceptions=True)
