"""A checked Messages request with server tools as a Responses request (`CreateResponse`), which
the responses provider answers through its tool loop and tool runtimes; and its errors named in
the Messages request's terms. Pure: no I/O.

A request goes this way when it has `mcp_servers`, a web search tool, or server tools' blocks
handed back in its messages (`uses_server_tools`).

    system                        instructions (text blocks joined by blank lines)
    messages                      input items (`input_items.py`)
    tools: custom                 `function` tools (input_schema as parameters, strict)
    tools: web_search_20250305    a `web_search` tool: allowed_domains as filters.allowed_domains, user_location;
    (and _20260209, _20260318)    max_uses as max_tool_calls (which bounds every server-side call of the response,
                                  MCP calls too: an approximation); blocked_domains is refused (the tool runtime
                                  filters to allowed domains only)
    mcp_servers                   `mcp` tools: name as server_label, url as server_url, authorization_token as
                                  authorization, tool_configuration.allowed_tools as allowed_tools, require_approval
                                  never (Anthropic's connector runs tools unasked); tool_configuration.enabled
                                  false leaves the server out
    tool_choice                   auto, any (required), none, tool (the named function, or the web_search type);
                                  disable_parallel_tool_use as parallel_tool_calls false
    max_tokens                    max_output_tokens (a budget over the tool loop's model turns)
    temperature, top_p            the same
    metadata.user_id              user
    thinking, output_config       reasoning.effort (as for chat); output_config.format as a json_schema text.format
                                  store false; include web_search_call.action.sources

Refused: `stop_sequences` (a Responses request has no stop sequences). Left out as for chat:
`top_k`, `cache_control`, `service_tier`, `speed`, `container`, `context_management`, and
Anthropic's other tool types.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contract.errors import APIError, InvalidRequestError
from contract.responses.models import CreateResponse
from providers.messages.blocks import SERVER_BLOCK_TYPES
from providers.messages.checks import WEB_SEARCH_TYPES
from providers.messages.input_items import ResultOpener, Reveal, input_items
from providers.messages.request import reasoning_effort

__all__ = ["Translated", "in_messages_terms", "messages_param", "response_request", "server_tools_field", "uses_server_tools"]

_MIN_OUTPUT = 16  # OpenAI's minimum of max_output_tokens; a Messages request may cap lower
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_SOURCES = "web_search_call.action.sources"

_RENAMES = {
    "mcp": {".server_url": ".url", ".authorization": ".authorization_token", ".server_label": ".name",
            ".allowed_tools": ".tool_configuration.allowed_tools", ".type": ""},
    "web_search": {".filters.allowed_domains": ".allowed_domains", ".filters": ".allowed_domains"},
    "function": {".parameters": ".input_schema"},
}
"""A Responses tool's fields as the Messages tool (or MCP server) it came from names them."""

_FIELDS = {"input": "messages", "max_output_tokens": "max_tokens", "instructions": "system", "text.format.schema": "output_config.format.schema",
           "text": "output_config", "reasoning.effort": "thinking", "reasoning": "thinking", "max_tool_calls": "tools",
           "parallel_tool_calls": "tool_choice"}


def uses_server_tools(body: Mapping[str, Any]) -> bool:
    """Whether a request has server tools to run (or their blocks handed back). Read before the
    request is checked (a chat request is checked once, on its own way), so it takes any shape."""
    if body.get("mcp_servers"):
        return True
    tools, messages = body.get("tools"), body.get("messages")
    if isinstance(tools, list) and any(isinstance(tool, dict) and _kind(tool) in WEB_SEARCH_TYPES for tool in tools):
        return True
    if not isinstance(messages, list):
        return False
    for message in messages:  # plain loops: a long conversation's blocks are read on every chat request
        if message.__class__ is dict and message.get("role") == "assistant" and (content := message.get("content")).__class__ is list:
            for block in content:
                if block.__class__ is dict and _kind(block) in SERVER_BLOCK_TYPES:
                    return True
    return False


def _kind(block: Mapping[str, Any]) -> str | None:
    """A block's or tool's `type` when it is a string (an unchecked body may hold any value there)."""
    kind = block.get("type")
    return kind if kind.__class__ is str else None


def server_tools_field(body: Mapping[str, Any]) -> str:
    """The first field of a request that `uses_server_tools`: what a refusal of them names."""
    if body.get("mcp_servers"):
        return "mcp_servers"
    for index, tool in enumerate(body.get("tools") or ()):
        if tool.get("type") in WEB_SEARCH_TYPES:
            return f"tools.{index}"
    for index, message in enumerate(body["messages"]):
        for number, block in enumerate(message["content"] if isinstance(message["content"], list) else ()):
            if block["type"] in SERVER_BLOCK_TYPES:
                return f"messages.{index}.content.{number}"
    return "tools"


@dataclass(frozen=True)
class Translated:
    """The Responses request, and where its parts came from in the Messages request."""

    request: CreateResponse
    web_search: bool
    tools: tuple[tuple[str, str], ...]
    """Per Responses tool: its type, and the Messages field it came from (`tools.2`, `mcp_servers.0`)."""
    origins: tuple[int, ...]
    """Per input item: the index of the message it came from."""


def response_request(body: Mapping[str, Any], *, stream: bool, reveal: Reveal | None, open_result: ResultOpener) -> Translated:
    """The CreateResponse for a checked Messages request with server tools."""
    if body.get("stop_sequences"):
        raise InvalidRequestError("stop_sequences: not supported with server tools (web search, MCP servers) on this server.",
                                  param="stop_sequences")
    items, origins = input_items(body["messages"], reveal=reveal, open_result=open_result)
    tools, sources, max_uses = _tools(body)
    web_search = any(kind == "web_search" for kind, _ in sources)
    fields: dict[str, Any] = {"model": body["model"], "input": items, "store": False, "stream": stream, "tools": tools}
    if body.get("system"):
        system = body["system"]
        fields["instructions"] = system if isinstance(system, str) else "\n\n".join(block["text"] for block in system)
    fields.update(_choice(body, tools))
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            fields[name] = body[name]
    user = (body.get("metadata") or {}).get("user_id")
    if isinstance(user, str):
        fields["user"] = user
    effort = reasoning_effort(body)
    if effort is not None:
        fields["reasoning"] = {"effort": effort}
    output_format = (body.get("output_config") or {}).get("format")
    if output_format is not None:
        fields["text"] = {"format": {"type": "json_schema", "name": "output", "schema": output_format["schema"]}}
    if max_uses is not None:
        fields["max_tool_calls"] = max_uses
    if web_search:
        fields["include"] = [_SOURCES]
    request = CreateResponse.model_validate(fields)
    # Set past validation: OpenAI's minimum is not the model's, and the cap is the client's.
    request = request.model_copy(update={"max_output_tokens": body["max_tokens"]})
    return Translated(request, web_search, tuple(sources), tuple(origins))


def _tools(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[str, str]], int | None]:
    """The Responses tools, the origin of each, and the web search's max_uses."""
    tools: list[dict[str, Any]] = []
    sources: list[tuple[str, str]] = []
    max_uses: int | None = None
    for index, tool in enumerate(body.get("tools") or ()):
        kind = tool.get("type")
        if kind in (None, "custom"):
            function = {"type": "function", "name": tool["name"], "parameters": tool["input_schema"]}
            function.update({key: tool[key] for key in ("description", "strict") if tool.get(key) is not None})
            tools.append(function)
        elif kind in WEB_SEARCH_TYPES:
            tools.append(_web_search(tool, index))
            max_uses = tool.get("max_uses") or max_uses
        else:
            continue  # Anthropic's other tools: the caller's, as for chat
        sources.append((tools[-1]["type"], f"tools.{index}"))
    for index, server in enumerate(body.get("mcp_servers") or ()):
        configuration = server.get("tool_configuration") or {}
        if configuration.get("enabled") is False:
            continue
        mcp: dict[str, Any] = {"type": "mcp", "server_label": server["name"], "server_url": server["url"], "require_approval": "never"}
        if server.get("authorization_token"):
            mcp["authorization"] = server["authorization_token"]
        if configuration.get("allowed_tools") is not None:
            mcp["allowed_tools"] = list(configuration["allowed_tools"])
        tools.append(mcp)
        sources.append(("mcp", f"mcp_servers.{index}"))
    return tools, sources, max_uses


def _web_search(tool: Mapping[str, Any], index: int) -> dict[str, Any]:
    if tool.get("blocked_domains"):
        raise InvalidRequestError(f"tools.{index}.blocked_domains: not supported by this server's web search; give allowed_domains "
                                  "instead.", param=f"tools.{index}.blocked_domains")
    search: dict[str, Any] = {"type": "web_search"}
    if tool.get("allowed_domains"):
        search["filters"] = {"allowed_domains": list(tool["allowed_domains"])}
    location = tool.get("user_location")
    if location is not None:
        search["user_location"] = {key: value for key, value in location.items() if value is not None}
    return search


def _choice(body: Mapping[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    choice = body.get("tool_choice")
    if choice is None or not tools:
        return {}
    fields: dict[str, Any] = {}
    if choice["type"] != "tool":
        fields["tool_choice"] = _CHOICES[choice["type"]]
    elif any(tool["type"] == "function" and tool["name"] == choice["name"] for tool in tools):
        fields["tool_choice"] = {"type": "function", "name": choice["name"]}
    elif choice["name"] == "web_search" and any(tool["type"] == "web_search" for tool in tools):
        fields["tool_choice"] = {"type": "web_search"}
    if choice.get("disable_parallel_tool_use") is True:
        fields["parallel_tool_calls"] = False
    return fields


_INDEXED = re.compile(r"^(tools|input)\[(\d+)\]")
_INVALID = re.compile(r"^(?:Invalid (?:value |type )?for |Invalid )'([^']+)': ")


def messages_param(param: str, translated: Translated) -> str:
    """A Responses request's parameter as the Messages request's field it came from."""
    found = _INDEXED.match(param)
    if found is None:
        return next((field for name, field in _FIELDS.items() if param == name or param.startswith(f"{name}.")), param)
    index, rest = int(found.group(2)), param[found.end():]
    if found.group(1) == "input":
        return f"messages.{translated.origins[index]}" if index < len(translated.origins) else "messages"
    if index >= len(translated.tools):
        return "tools"
    kind, field = translated.tools[index]
    for name, renamed in _RENAMES.get(kind, {}).items():
        if rest == name or rest.startswith(f"{name}."):
            rest = renamed + rest[len(name):]
            break
    return field + re.sub(r"\[(\d+)\]", r".\1", rest)


def in_messages_terms(error: APIError, translated: Translated) -> APIError:
    """The responses provider's error, naming the Messages request's field as Anthropic words it
    (`mcp_servers.0.url: ...`) instead of the Responses request's (`Invalid 'tools[0].server_url': ...`)."""
    if not error.param:
        return error
    param = messages_param(error.param, translated)
    message = error.message
    found = _INVALID.match(message)
    if found is not None and found.group(1) == error.param:
        message = f"{param}: {message[found.end():]}"
    else:
        message = message.replace(f"'{error.param}'", f"'{param}'")
    renamed = copy.copy(error)  # of its own class, with its status and type
    renamed.message, renamed.param, renamed.args = message, param, (message,)
    return renamed
