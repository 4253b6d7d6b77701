"""One response's MCP servers: their tool lists, approvals, and calls."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from providers.tool_runtime.mcp.endpoint import Endpoint, McpFailure
from providers.tool_runtime.mcp.items import call_outcome, is_allowed, listed_tools, needs_approval
from contract.items import new_id
from contract.tool_runtime.protocol import FunctionSpec, ItemSink, ModelCall, ToolContext
from contract.errors import FailedDependencyError, InvalidRequestError

if TYPE_CHECKING:
    from providers.tool_runtime.mcp.client import Connection

__all__ = ["McpSession", "Server", "ServerAccess"]


class ServerAccess(Protocol):
    """What a session asks of the tool runtime that opened it (`runtime.McpRuntime`): a
    connection to a server, and the server's tools from the process's cache while it is fresh."""

    def connect(self, endpoint: Endpoint) -> Connection: ...

    async def list_tools(self, server: Server, connection: Connection) -> list[dict[str, Any]]: ...


@dataclass
class Server:
    """One `mcp` entry of a request, resolved."""

    endpoint: Endpoint
    description: str | None
    allowed_tools: Any
    require_approval: Any
    operator_tools: list[str] | None = None
    """The tools the operator lets requests use on a configured server (None: all)."""
    tools: list[dict[str, Any]] | None = None
    """As listed (allowed ones only), once known."""
    connection: Connection | None = None
    by_name: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.endpoint.label

    def allows(self, tool: Mapping[str, Any]) -> bool:
        return is_allowed(tool, self.operator_tools) and is_allowed(tool, self.allowed_tools)

    def use(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.tools = [dict(tool) for tool in tools if self.allows(tool)]
        self.by_name = {tool["name"]: tool for tool in self.tools}


class McpSession:
    """Implements contract.tool_runtime.protocol.ToolSession for a request's `mcp` tools."""

    def __init__(self, runtime: ServerAccess, servers: list[Server], context: ToolContext, pending: list[ModelCall]) -> None:
        self.runtime = runtime
        self.servers = servers
        self.context = context
        self._pending = pending
        self._by_label = {server.label: server for server in servers}

    # --- before the first model call ------------------------------------------------------------

    def preparations(self) -> Sequence[Callable[[ItemSink], Awaitable[None]]]:
        """A listing per server the context does not list already (OpenAI reuses an
        `mcp_list_tools` item of the chain or conversation instead of listing again)."""
        context = [*self.context.history, *self.context.input]
        steps: list[Callable[[ItemSink], Awaitable[None]]] = []
        for server in self.servers:
            known = listed_tools(context, server.label)
            if known is not None and _covers(known, server.allowed_tools):
                server.use(known)
            else:
                steps.append(self._lister(server))
        return steps

    def _lister(self, server: Server) -> Callable[[ItemSink], Awaitable[None]]:
        async def list_tools(sink: ItemSink) -> None:
            item = sink.open({"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": server.label, "tools": []})
            item.emit("response.mcp_list_tools.in_progress")
            try:
                tools = await self.runtime.list_tools(server, self.connection(server))
            except McpFailure as failure:
                item.item["error"] = failure.message
                item.emit("response.mcp_list_tools.failed")
                raise FailedDependencyError(
                    f"Error retrieving tool list from MCP server: '{server.label}'. {failure.status_text}",
                    param="tools", code="http_error",
                ) from None
            server.use(tools)
            item.item["tools"] = server.tools
            item.emit("response.mcp_list_tools.completed")

        return list_tools

    def pending_calls(self) -> Sequence[ModelCall]:
        return self._pending

    # --- model turns ----------------------------------------------------------------------------

    def functions(self) -> Sequence[FunctionSpec]:
        specs: list[FunctionSpec] = []
        for index, server in enumerate(self.servers):
            for tool in server.tools or ():
                description = tool.get("description") or None
                if server.description:  # what the request says of the server, for the model to know where the tool leads
                    description = f"{description or tool['name']}\n\n(A tool of the MCP server '{server.label}': {server.description})"
                specs.append(FunctionSpec(name=tool["name"], parameters=tool.get("input_schema") or {"type": "object"},
                                          description=description, group=server.label, key=f"{index}:{tool['name']}"))
        return specs

    def _resolve(self, key: str) -> tuple[Server, str]:
        index, _, name = key.partition(":")
        return self.servers[int(index)], name

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        server, name = self._resolve(call.name)
        if not needs_approval(server.by_name.get(name, {"name": name}), server.require_approval):
            return None
        return {"id": new_id("mcpr"), "type": "mcp_approval_request", "server_label": server.label, "name": name,
                "arguments": call.arguments}

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        server, name = self._resolve(call.name)
        item = sink.open({
            "id": new_id("mcp"), "type": "mcp_call", "server_label": server.label, "name": name, "arguments": "",
            "status": "in_progress", "output": None, "error": None, "approval_request_id": call.approval_request_id,
        })
        item.emit("response.mcp_call.in_progress")
        if call.arguments:
            item.emit("response.mcp_call_arguments.delta", delta=call.arguments)
        item.item["arguments"] = call.arguments
        item.emit("response.mcp_call_arguments.done", arguments=call.arguments)
        try:
            arguments = _arguments(call.arguments)
            result = await self.connection(server).call_tool(name, arguments)
        except McpFailure as failure:
            item.item.update(status="failed", error=failure.error)
            item.emit("response.mcp_call.failed")
            return
        output, attachments = call_outcome(result)
        if result.is_error:
            content = [block.model_dump(mode="json", exclude_none=True) for block in result.content or ()]
            item.item.update(status="failed", error={"type": "mcp_tool_execution_error", "content": content})
            item.emit("response.mcp_call.failed")
            return
        item.item.update(status="completed", output=output)
        if attachments:
            item.item["content"] = attachments
        item.emit("response.mcp_call.completed")

    def citations(self) -> None:
        """MCP results are not sources to cite."""
        return None

    def connection(self, server: Server) -> Connection:
        if server.connection is None:
            server.connection = self.runtime.connect(server.endpoint)
        return server.connection

    async def aclose(self) -> None:
        """The sessions stay in the runtime's pool for later responses."""
        for server in self.servers:
            server.connection = None


def _covers(known: Sequence[Mapping[str, Any]], allowed_tools: Any) -> bool:
    """Whether a listing from the context can serve this request: not when the request allows
    by name a tool that listing lacks (it was listed under a narrower `allowed_tools`)."""
    if not isinstance(allowed_tools, list):
        return True
    names = {tool["name"] for tool in known}
    return all(name in names for name in allowed_tools)


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError as error:
        raise McpFailure({"type": "mcp_protocol_error", "code": -32602,
                          "message": f"The arguments are not valid JSON: {error}"}) from None
    if not isinstance(value, dict):
        raise McpFailure({"type": "mcp_protocol_error", "code": -32602, "message": "The arguments must be a JSON object."})
    return value


def pending_approvals(servers: Mapping[str, Server], context: ToolContext) -> list[ModelCall]:
    """The calls this turn's input approves (`mcp_approval_response` with approve=true): each
    must answer an approval request of the context that has not run yet, on a server of this
    request's tools; anything else is a 400."""
    items = [*context.history, *context.input]
    requests = {item.get("id"): item for item in items if item.get("type") == "mcp_approval_request"}
    done = {item.get("approval_request_id") for item in items if item.get("type") == "mcp_call"}
    calls: list[ModelCall] = []
    for index, item in enumerate(context.input):
        if item.get("type") != "mcp_approval_response" or not item.get("approve"):
            continue
        request_id = item.get("approval_request_id")
        where = f"input[{index}].approval_request_id"
        request = requests.get(request_id)
        if request is None:
            raise InvalidRequestError(f"Invalid '{where}': no MCP approval request with id {str(request_id)[:80]!r} is in the "
                                      "context (previous_response_id, conversation or input).", param=where, code="invalid_value")
        label = request.get("server_label")
        if label not in servers:
            raise InvalidRequestError(f"Invalid '{where}': the approved call is for MCP server {label!r}, which is not in 'tools'.",
                                      param=where, code="invalid_value")
        if request_id in done:
            continue
        key = f"{list(servers).index(str(label))}:{request.get('name')}"
        calls.append(ModelCall(key, str(request.get("arguments") or "{}"), str(request_id), approval_request_id=str(request_id)))
    return calls
