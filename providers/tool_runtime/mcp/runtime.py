"""The `mcp` tool type: checks a request's MCP tools, opens sessions over them, lists and calls."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from contract.spec import Api, ProviderContext, ProviderSpec
from providers.tool_runtime.mcp.config import McpConfig, McpServerConfig
from providers.tool_runtime.mcp.endpoint import Endpoint
from providers.tool_runtime.mcp.items import ITEM_TYPES, render, tool_entry
from providers.tool_runtime.mcp.session import McpSession, Server, pending_approvals
from contract.tool_runtime.protocol import PublicTool, ToolContext, ToolExchange
from contract.errors import InvalidRequestError
from runtime.security.netguard import AddressPolicy

if TYPE_CHECKING:
    import httpx2

    from providers.tool_runtime.mcp.client import Connection, ConnectionPool

__all__ = ["MCP", "McpRuntime"]

_SECRET_FIELDS = ("authorization", "headers")


class McpRuntime:
    """Implements contract.tool_runtime.protocol.ToolRuntime for `mcp` tools."""

    tool_types = frozenset({"mcp"})
    item_types = ITEM_TYPES

    def __init__(self, config: McpConfig, transports: Callable[[bool], httpx2.AsyncBaseTransport]) -> None:
        self.config = config
        self.policy = AddressPolicy(config.allow_private)
        self._transports = transports
        """Makes the transport for request URLs (False: guarded) or configured servers (True)."""
        self._by_label = {server.server_label: server for server in config.servers}
        self._by_connector = {server.connector_id: server for server in config.servers if server.connector_id}
        self._lists: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._pool: ConnectionPool | None = None  # built on first use: the SDK and HTTP stack load then

    # --- checking a request's tools -------------------------------------------------------------

    async def check_tool(self, tool: Mapping[str, Any], param: str) -> None:
        label = tool.get("server_label")
        if not isinstance(label, str) or not label:
            raise _invalid(f"{param}.server_label", "Missing required parameter: '{param}'.", "missing_required_parameter")
        if tool.get("tunnel_id") is not None:
            raise _invalid(f"{param}.tunnel_id", "Invalid '{param}': Secure MCP Tunnels are not supported here; give a server_url.")
        _check_strings(tool.get("headers"), f"{param}.headers")
        if tool.get("authorization") is not None and not isinstance(tool["authorization"], str):
            raise _invalid(f"{param}.authorization", "Invalid type for '{param}': expected a string.", "invalid_type")
        _check_filter(tool.get("allowed_tools"), f"{param}.allowed_tools", names_allowed=True)
        approval = tool.get("require_approval")
        if isinstance(approval, Mapping):
            for key in ("always", "never"):
                _check_filter(approval.get(key), f"{param}.require_approval.{key}", names_allowed=False)
        elif approval not in (None, "always", "never"):
            raise _invalid(f"{param}.require_approval", "Invalid value for '{param}': expected 'always', 'never' or a filter object.")
        await self._check_server(tool, label, param)

    async def _check_server(self, tool: Mapping[str, Any], label: str, param: str) -> None:
        """The server must be reachable by this request: a URL the network rules allow, or a
        configured server (by label or connector)."""
        url, connector = tool.get("server_url"), tool.get("connector_id")
        if url is not None:
            if not isinstance(url, str):
                raise _invalid(f"{param}.server_url", "Invalid type for '{param}': expected a URL string.", "invalid_type")
            if not self.config.allow_request_urls:
                raise _invalid(f"{param}.server_url", "Invalid '{param}': this server does not let requests name MCP server URLs; "
                               f"use one of its configured servers by server_label ({', '.join(self._by_label) or 'none configured'}).")
            await self.policy.check_url(url, f"{param}.server_url")
        elif connector is not None:
            if connector not in self._by_connector:
                raise _invalid(f"{param}.connector_id", f"Invalid '{{param}}': connector {str(connector)[:80]!r} is not configured on this "
                               f"server (configured: {', '.join(self._by_connector) or 'none'}).")
        elif label not in self._by_label:
            raise _invalid(f"{param}.server_url", f"Missing required parameter: '{{param}}' (or a connector_id): no MCP server labelled "
                           f"{label[:80]!r} is configured on this server.", "missing_required_parameter")

    def public_tool(self, tool: Mapping[str, Any]) -> PublicTool:
        """Without `authorization` and `headers`, and with `server_url` cut to its origin (paths and
        queries of MCP URLs may hold credentials): OpenAI's rule for what a response shows."""
        public = {key: value for key, value in tool.items() if key not in _SECRET_FIELDS}
        removed = any(tool.get(key) for key in _SECRET_FIELDS)
        url = tool.get("server_url")
        if isinstance(url, str):
            parsed = urlsplit(url)
            host = parsed.hostname or ""
            origin = f"{parsed.scheme}://{f'[{host}]' if ':' in host else host}{f':{parsed.port}' if parsed.port else ''}"
            removed = removed or origin != url.rstrip("/")
            public["server_url"] = origin
        return PublicTool(public, removed)

    def render(self, item: Mapping[str, Any]) -> ToolExchange | None:
        return render(item)

    # --- sessions ------------------------------------------------------------------------------

    async def open_session(self, tools: Sequence[Mapping[str, Any]], context: ToolContext) -> McpSession:
        servers: dict[str, Server] = {}
        for tool in tools:
            server = self._server(tool)
            if server.label in servers:
                raise InvalidRequestError(f"Invalid 'tools': two MCP tools have the server_label {server.label!r}.", param="tools",
                                          code="invalid_value")
            servers[server.label] = server
        return McpSession(self, list(servers.values()), context, pending_approvals(servers, context))

    def _server(self, tool: Mapping[str, Any]) -> Server:
        label = str(tool["server_label"])
        configured = self._configured(tool)
        headers = {**dict(tool.get("headers") or {})}
        if tool.get("authorization"):
            headers["Authorization"] = f"Bearer {tool['authorization']}"
        if configured is not None and tool.get("server_url") is None:
            headers.update(configured.headers)  # the operator's credentials win
            if configured.authorization:
                headers["Authorization"] = f"Bearer {configured.authorization}"
            endpoint = Endpoint(label, configured.server_url, tuple(headers.items()), trusted=True)
            approval = tool.get("require_approval", configured.require_approval)
            return Server(endpoint, tool.get("server_description") or configured.server_description, tool.get("allowed_tools"),
                          approval, operator_tools=configured.allowed_tools)
        endpoint = Endpoint(label, str(tool["server_url"]), tuple(headers.items()))
        approval = tool.get("require_approval")
        return Server(endpoint, tool.get("server_description"), tool.get("allowed_tools"),
                      self.config.default_require_approval if approval is None else approval)

    def _configured(self, tool: Mapping[str, Any]) -> McpServerConfig | None:
        if tool.get("connector_id") is not None:
            return self._by_connector.get(tool["connector_id"])
        return self._by_label.get(str(tool["server_label"]))

    def connect(self, endpoint: Endpoint) -> Connection:
        """A session with the server, the pooled one while it lasts."""
        return self.pool().get(endpoint)

    def pool(self) -> ConnectionPool:
        if self._pool is None:
            from providers.tool_runtime.mcp.client import Connection, ConnectionPool, ProtocolMemory, SharedTransport, Timeouts

            config, memory = self.config, ProtocolMemory()
            timeouts = Timeouts(config.connect_timeout_s, config.list_timeout_s, config.call_timeout_s)
            shared = {trusted: SharedTransport(self._transports(trusted)) for trusted in (False, True)}
            self._pool = ConnectionPool(lambda endpoint: Connection(endpoint, shared[endpoint.trusted], timeouts, memory),
                                        config.session_idle_s)
        return self._pool

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()

    async def list_tools(self, server: Server, connection: Connection) -> list[dict[str, Any]]:
        """Every tool of the server, from this process's cache while it is fresh."""
        key = server.endpoint.key
        cached = self._lists.get(key)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        tools = [tool_entry(tool) for tool in await connection.list_tools()]
        if self.config.list_cache_s > 0:
            self._lists[key] = (now + self.config.list_cache_s, tools)
        return tools


def _invalid(param: str, message: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message.replace("{param}", param), param=param, code=code)


def _check_strings(value: Any, param: str) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _invalid(param, "Invalid type for '{param}': expected an object of string values.", "invalid_type")


def _check_filter(value: Any, param: str, *, names_allowed: bool) -> None:
    if value is None:
        return
    if names_allowed and isinstance(value, list):
        if not all(isinstance(name, str) for name in value):
            raise _invalid(param, "Invalid type for '{param}': expected a list of tool names.", "invalid_type")
        return
    if not isinstance(value, Mapping) or set(value) - {"tool_names", "read_only"}:
        raise _invalid(param, "Invalid value for '{param}': expected a filter object with tool_names and/or read_only.")
    names = value.get("tool_names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(name, str) for name in names)):
        raise _invalid(f"{param}.tool_names", "Invalid type for '{param}': expected a list of tool names.", "invalid_type")
    if value.get("read_only") is not None and not isinstance(value["read_only"], bool):
        raise _invalid(f"{param}.read_only", "Invalid type for '{param}': expected a boolean.", "invalid_type")


@contextlib.asynccontextmanager
async def create(context: ProviderContext[McpConfig]) -> AsyncIterator[McpRuntime]:
    config = context.config
    policy = AddressPolicy(config.allow_private)
    made: list[httpx2.AsyncBaseTransport] = []

    def transport(trusted: bool) -> httpx2.AsyncBaseTransport:
        # Request URLs go through the network guard; the operator's servers are trusted.
        made.append(context.http_transport(max_connections=config.max_connections, connect_timeout=config.connect_timeout_s,
                                           address_guard=None if trusted else policy.allows))
        return made[-1]

    runtime = McpRuntime(config, transport)
    try:
        yield runtime
    finally:
        await runtime.aclose()
        for made_transport in made:
            await made_transport.aclose()


MCP = ProviderSpec(
    api=Api.tool_runtime,
    name="mcp",
    config_model=McpConfig,
    factory=create,
    pip_packages=("mcp>=2.0",),
    description="Remote MCP servers as the Responses API's `mcp` tool (Streamable HTTP and SSE), with approvals and operator-configured servers",
    sample_config={},
)
