"""The tools of one response: the client's function tools, the server-side tool sessions, and the
function names the model sees for them.

A server-side tool offers functions (an MCP server, the functions it lists). The model sees every
function under a name unique among all of them: its own name, or, when a client function or
another tool already has that name, its group's label and its name (`docs__search`). Calls come
back by that name and go to the session that offered the function.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from providers.responses.client_tools import (
    CLIENT_TOOL_TYPES, ClientTool, check_client_tool, client_tools, loaded_tools, tool_choice_name,
)
from contract.responses.models import HOSTED_TOOL_TYPES, CreateResponse, hosted_shell
from contract.tool_runtime.protocol import Citations, FunctionSpec, ModelCall, ToolContext, ToolSession
from runtime.apis.tool_runtime.router import ToolRouter
from contract.tool_runtime.web_search import WEB_SEARCH_TYPES
from contract.errors import InvalidRequestError

__all__ = ["Offered", "RequestTools", "check_server_tools", "needs_request_tools", "open_request_tools", "public_tools", "served_only"]

log = logging.getLogger("stack")

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64  # OpenAI's limit on function names, which OpenAI-compatible servers copy


async def check_server_tools(request: CreateResponse, router: ToolRouter | None) -> None:
    """Every non-function tool must be of a type a tool runtime serves, and pass its checks."""
    for index, tool in enumerate(request.tools or ()):
        kind = tool.get("type")
        if kind in CLIENT_TOOL_TYPES and not hosted_shell(tool):
            check_client_tool(tool, f"tools[{index}]")
            continue
        runtime = router.runtime_for(kind) if router is not None and isinstance(kind, str) else None
        if runtime is None and hosted_shell(tool):
            raise InvalidRequestError(
                f"Invalid value for 'tools[{index}].environment': a shell in a container needs this server's containers, and it has "
                "none. Add a sandboxes provider, containers and the container_shell tool_runtime to run.yaml (see docs/code-interpreter.md), "
                "or leave the environment out for a shell the client runs.", param=f"tools[{index}].environment", code="unsupported_tool_type")
        if runtime is None and isinstance(kind, str) and kind in WEB_SEARCH_TYPES:
            raise InvalidRequestError(
                f"Invalid value for 'tools[{index}].type': {kind!r} needs a search backend, and this server has none. Add a "
                "tool_runtime provider of type tavily, brave or searxng to run.yaml (see README: Web search).",
                param=f"tools[{index}].type", code="unsupported_tool_type")
        if runtime is None:
            supported = ", ".join([*sorted(CLIENT_TOOL_TYPES), *(router.tool_types if router is not None else ())])
            raise InvalidRequestError(
                f"Invalid value for 'tools[{index}].type': tool type {str(kind)[:80]!r} is not supported by this server "
                f"(supported: {supported}). Server-side tools are served by tool_runtime providers in run.yaml.",
                param=f"tools[{index}].type", code="unsupported_tool_type",
            )
        await runtime.check_tool(tool, f"tools[{index}]")
    client_tools(request.tools or ())  # two tools the model would know by one name are a 400


def served_only(request: CreateResponse, router: ToolRouter | None) -> CreateResponse:
    """The request without its tools of OpenAI's hosted types that no tool runtime here serves
    (run.yaml's `unserved_tools: omit`): the model never sees them. A type nobody defines is
    kept, for `check_server_tools` to refuse: omission is for clients written for OpenAI (the
    Codex CLI's `web_search`), not for typos."""
    tools = request.tools or []
    kept = [tool for tool in tools if tool.get("type") not in HOSTED_TOOL_TYPES
            or (router is not None and router.runtime_for(tool["type"]) is not None)]
    if len(kept) == len(tools):
        return request
    log.info("left out of the model's view: tools of types no tool runtime serves (%s)",
             ", ".join(sorted({str(tool.get("type")) for tool in tools if tool not in kept})))
    return request.model_copy(update={"tools": kept})


def public_tools(request: CreateResponse, router: ToolRouter | None) -> tuple[list[dict[str, Any]], bool]:
    """The request's tools as a response may store and echo them (secrets left out), and whether
    any secret was left out."""
    tools: list[dict[str, Any]] = []
    removed = False
    for tool in request.tools or ():
        runtime = router.runtime_for(tool["type"]) if router is not None and _server_side(tool) else None
        if runtime is None:
            # A function's optional keys are shown (null when not given), as OpenAI's echo has them.
            tools.append({"description": None, "parameters": None, "strict": None, **tool} if tool.get("type") == "function" else tool)
            continue
        public = runtime.public_tool(tool)
        tools.append(public.tool)
        removed = removed or public.secrets_removed
    return tools, removed


def needs_request_tools(request: CreateResponse, history: list[dict[str, Any]], input_items: list[dict[str, Any]]) -> bool:
    """Whether the model is offered more than the request's plain client functions, as they are:
    server-side tools, deferred functions, or tools a client tool search loaded earlier in the context."""
    tools = request.tools or ()
    return any(tool.get("type") != "function" or tool.get("defer_loading") for tool in tools) or bool(tools and any(
        item.get("type") == "tool_search_output" for item in (*history, *input_items)))


async def open_request_tools(request: CreateResponse, router: ToolRouter | None, response_id: str, history: list[dict[str, Any]],
                             input_items: list[dict[str, Any]]) -> RequestTools | None:
    """The request's tools, opened (a session per tool runtime), when it `needs_request_tools`."""
    if needs_request_tools(request, history, input_items):
        return await RequestTools.open(request, router, ToolContext(response_id, history, input_items))
    return None


@dataclass(frozen=True)
class Offered:
    """A function as the model sees it."""

    model_name: str
    chat: dict[str, Any]
    """The Chat Completions tool definition (under `model_name`)."""
    session: ToolSession | None
    """None: a client-side function tool."""
    spec: FunctionSpec | None
    tool_types: frozenset[str]
    client: ClientTool | None = None
    """The client tool (function, custom, apply_patch...) this function stands for."""


class RequestTools:
    """Open with `open`, `prepare` (sessions first), then ask for `chat_tools` each model turn."""

    def __init__(self, request: CreateResponse, sessions: Sequence[tuple[ToolSession, frozenset[str]]],
                 loaded: Sequence[Mapping[str, Any]] = ()) -> None:
        self.request = request
        self.sessions = list(sessions)
        self.loaded = list(loaded)
        """Tools a client tool search loaded earlier in the context (`tool_search_output`)."""
        self._offered: list[Offered] = []
        self._by_name: dict[str, Offered] = {}

    @classmethod
    async def open(cls, request: CreateResponse, router: ToolRouter | None, context: ToolContext) -> RequestTools:
        """A session per tool runtime the request's tools use (none without server-side tools)."""
        grouped: dict[int, tuple[Any, list[dict[str, Any]]]] = {}
        for tool in request.tools or ():
            if router is None or not _server_side(tool):
                continue
            runtime = router.runtime_for(tool["type"])
            if runtime is not None:
                grouped.setdefault(id(runtime), (runtime, []))[1].append(tool)
        opened: list[tuple[ToolSession, frozenset[str]]] = []
        try:
            for runtime, tools in grouped.values():
                opened.append((await runtime.open_session(tools, context), frozenset(runtime.tool_types)))
        except BaseException:
            await asyncio.gather(*(session.aclose() for session, _ in opened), return_exceptions=True)
            raise
        return cls(request, opened, loaded_tools([*context.history, *context.input]))

    @property
    def has_server_tools(self) -> bool:
        return bool(self.sessions)

    def offer(self) -> None:
        """Name every function for the model (after the sessions are prepared)."""
        offered: list[Offered] = []
        taken: set[str] = set()
        for client in client_tools(self.request.tools or (), self.loaded):
            offered.append(Offered(client.model_name, client.chat, None, None, frozenset({client.kind}), client))
            taken.add(client.model_name)
        for session, types in self.sessions:
            for spec in session.functions():
                name = _unique_name(spec, taken)
                taken.add(name)
                function: dict[str, Any] = {"name": name, "parameters": dict(spec.parameters)}
                if spec.description:
                    function["description"] = spec.description
                offered.append(Offered(name, {"type": "function", "function": function}, session, spec, types))
        self._offered = offered
        self._by_name = {entry.model_name: entry for entry in offered}
        _check_choice_targets(self.request.tool_choice, offered)

    def client_tool(self, model_name: str) -> ClientTool | None:
        entry = self._by_name.get(model_name)
        return entry.client if entry is not None else None

    def is_server(self, model_name: str) -> bool:
        entry = self._by_name.get(model_name)
        return entry is not None and entry.session is not None

    def server_call(self, model_name: str, arguments: str, call_id: str) -> tuple[ToolSession, ModelCall]:
        entry = self._by_name[model_name]
        assert entry.session is not None and entry.spec is not None
        return entry.session, ModelCall(entry.spec.key or entry.spec.name, arguments, call_id)

    def tool_type(self, model_name: str) -> str:
        """The tool type (mcp, file_search...) of the function the model knows as `model_name`."""
        entry = self._by_name.get(model_name)
        return min(entry.tool_types) if entry is not None and entry.tool_types else "function"

    def function_name(self, call: ModelCall) -> str:
        """The name of the function a server-side call runs, as its tool knows it (for traces)."""
        return next((entry.spec.name for entry in self._offered if entry.spec is not None and (entry.spec.key or entry.spec.name) == call.name),
                    call.name)

    def chat_tools(self, *, first_turn: bool, server_calls_left: bool) -> tuple[list[dict[str, Any]], Any]:
        """The tools and tool_choice of a model turn. `tool_choice` beyond `auto` forces only the
        first turn (later turns must be free to answer); once `max_tool_calls` is reached, no
        server-side function is offered."""
        choice = self.request.tool_choice
        if choice == "none":
            return [], None
        offered = [entry for entry in self._offered if server_calls_left or entry.session is None]
        # allowed_tools limits every turn; a choice of one tool (or type) only the turn it forces.
        if isinstance(choice, dict) and (first_turn or choice.get("type") == "allowed_tools"):
            offered = [entry for entry in offered if _chosen(entry, choice)]
        tools = [entry.chat for entry in offered]
        if not tools:
            return [], None
        if not first_turn or choice in (None, "auto"):
            return tools, "auto" if choice is not None else None
        if choice == "required":
            return tools, "required"
        assert isinstance(choice, dict)
        if choice.get("type") == "allowed_tools":
            return tools, choice.get("mode") or "auto"
        if len(tools) == 1 or tool_choice_name(choice) is not None:
            return tools, {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
        return tools, "required"

    def citations(self) -> Citations | None:
        """What ties the next part of the answer to its sources (the first session with any)."""
        for session, _ in self.sessions:
            citations = session.citations()
            if citations is not None:
                return citations
        return None

    def pending_calls(self) -> list[tuple[ToolSession, ModelCall]]:
        return [(session, call) for session, _ in self.sessions for call in session.pending_calls()]

    async def aclose(self) -> None:
        await asyncio.gather(*(session.aclose() for session, _ in self.sessions), return_exceptions=True)


def _server_side(tool: Mapping[str, Any]) -> bool:
    """A tool some tool runtime may serve: not one of the client's (a shell in a container is the server's)."""
    return tool.get("type") not in CLIENT_TOOL_TYPES or hosted_shell(tool)


def _unique_name(spec: FunctionSpec, taken: set[str]) -> str:
    base = _NAME_UNSAFE.sub("_", spec.name) or "tool"
    if base[:MAX_NAME] not in taken:
        return base[:MAX_NAME]
    prefix = _NAME_UNSAFE.sub("_", spec.group or "tool")
    name = f"{prefix}__{base}"[:MAX_NAME]
    suffix = 2
    while name in taken:
        tail = f"_{suffix}"
        name = f"{prefix}__{base}"[: MAX_NAME - len(tail)] + tail
        suffix += 1
    return name


def _chosen(entry: Offered, choice: Mapping[str, Any]) -> bool:
    """Whether a tool_choice object (or an `allowed_tools` list) selects this function."""
    kind = choice.get("type")
    if kind == "allowed_tools":
        return any(isinstance(tool, Mapping) and _chosen(entry, tool) for tool in choice.get("tools") or ())
    if entry.client is not None:
        return tool_choice_name(choice) == entry.model_name
    if kind not in entry.tool_types or entry.spec is None:
        return False
    label = choice.get("server_label")
    if label is not None and entry.spec.group != label:
        return False
    name = choice.get("name")
    return name is None or entry.spec.name == name


def _check_choice_targets(choice: Any, offered: Sequence[Offered]) -> None:
    """A tool_choice naming a server-side tool must name one of this request's."""
    if not isinstance(choice, dict) or choice.get("type") in ("function", "allowed_tools", None):
        return
    if not any(_chosen(entry, choice) for entry in offered):
        what = " ".join(f"{key}={choice[key]!r}" for key in ("server_label", "name") if choice.get(key) is not None)
        raise InvalidRequestError(
            f"Invalid value for 'tool_choice': no tool of type {choice.get('type')!r}{(' with ' + what) if what else ''} is in 'tools'.",
            param="tool_choice", code="invalid_value",
        )
