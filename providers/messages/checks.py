"""A Messages request checked as Anthropic checks it: every mistake Anthropic refuses is a 400
worded as Anthropic words it, naming its field as `param` too (`fields.py` has the wording).

The fields are those of anthropic 2.14's `MessageCreateParams`, plus `temperature`, `top_p` and
`top_k` (which that SDK no longer declares, but which Anthropic's API takes for every model before
Claude Opus 4.7, and which chat models take), and the two beta fields Claude Code sends under an
`anthropic-beta` header this check does not see (`context_management`, `mcp_servers`; without the
header Anthropic answers "context_management: Extra inputs are not permitted"). Any other field is
"x: Extra inputs are not permitted".

Roles: consecutive messages of one role are merged into one turn, as Anthropic's own documentation
of `messages` says it does ("Consecutive `user` or `assistant` turns in your request will be
combined into a single turn"), never refused; and a first message of the assistant's is let
through, as Anthropic lets it through today (it used to answer 'messages: first message must use
the "user" role'; its current documentation names no such rule). What is refused is what it
refuses: no messages at all, an empty message, and tool uses and tool results that do not pair
across turns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from contract.errors import InvalidRequestError
from providers.messages.blocks import check_message, check_system
from providers.messages.fields import (
    ROOT,
    Check,
    Where,
    anything,
    boolean,
    dictionary,
    fields,
    integer,
    list_of,
    literal,
    nullable,
    number,
    refuse,
    tagged,
    text,
)

__all__ = ["SERVER_TOOL_TYPES", "WEB_SEARCH_TYPES", "check_request"]

_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_NAME_PATTERN = "^[a-zA-Z0-9_-]{1,128}$"  # Anthropic's: "tools.0.custom.name: String should match pattern '...'"

SERVER_TOOL_TYPES = (
    "bash_20250124", "code_execution_20250522", "code_execution_20250825", "code_execution_20260120", "code_execution_20260521",
    "browser_toolset_20260801", "memory_20250818", "computer_toolset_20260801", "text_editor_20250124", "text_editor_20250429",
    "text_editor_20250728", "web_search_20250305", "web_fetch_20250910", "web_search_20260209", "web_fetch_20260209",
    "web_fetch_20260309", "web_search_20260318", "web_fetch_20260318", "tool_search_tool_bm25_20251119", "tool_search_tool_bm25",
    "tool_search_tool_regex_20251119", "tool_search_tool_regex",
)
"""The tool types of anthropic 2.14's `ToolUnionParam` other than a custom tool: Anthropic's own
tools. The web search ones (`WEB_SEARCH_TYPES`) and `mcp_servers` are run by this server
(`server_tools.py`); the others are accepted here and left to the caller (the model is offered
custom tools only)."""

WEB_SEARCH_TYPES = ("web_search_20250305", "web_search_20260209", "web_search_20260318")
"""The versions of Anthropic's web search tool (anthropic 2.14's `WebSearchTool*Param`)."""

_CALLERS = ("direct", "code_execution_20250825", "code_execution_20260120", "code_execution_20260521")
_LOCATION = fields({"type": literal("approximate")}, {key: nullable(text) for key in ("city", "country", "region", "timezone")})


def _web_search_tool(kind: str) -> Check:
    optional: dict[str, Check] = {
        "allowed_callers": list_of(literal(*_CALLERS)), "allowed_domains": nullable(list_of(text)),
        "blocked_domains": nullable(list_of(text)), "cache_control": nullable(dictionary), "defer_loading": boolean,
        "max_uses": nullable(integer(1)), "strict": boolean, "user_location": nullable(_LOCATION)}
    if kind == "web_search_20260318":
        optional["response_inclusion"] = literal("full", "excluded")
    return fields({"name": literal("web_search"), "type": literal(kind)}, optional)


_MCP_SERVER = fields({"name": text, "type": literal("url"), "url": text}, {
    "authorization_token": nullable(text),
    "tool_configuration": nullable(fields({}, {"allowed_tools": nullable(list_of(text)), "enabled": nullable(boolean)}))})
"""An entry of `mcp_servers` (anthropic's `BetaRequestMCPServerURLDefinitionParam`)."""


def _tool_name(value: Any, where: Where) -> None:
    text(value, where)
    if not value:
        raise refuse(where, "String should have at least 1 character")
    if len(value) > 128:
        raise refuse(where, "String should have at most 128 characters")
    if not _NAME.fullmatch(value):
        raise refuse(where, f"String should match pattern '{_NAME_PATTERN}'")


def _input_schema(value: Any, where: Where) -> None:
    dictionary(value, where)
    if "type" not in value:
        raise refuse(where.key("type"), "Field required")
    literal("object")(value["type"], where.key("type"))
    if any(key in value for key in ("oneOf", "allOf", "anyOf")):
        raise refuse(where, "input_schema does not support oneOf, allOf, or anyOf at the top level")


_CUSTOM_TOOL = fields({"input_schema": _input_schema, "name": _tool_name}, {
    "allowed_callers": list_of(text), "cache_control": nullable(dictionary), "defer_loading": boolean, "description": text,
    "eager_input_streaming": nullable(boolean), "input_examples": list_of(dictionary), "strict": boolean,
    "type": nullable(literal("custom"))})
_TOOL = tagged({"custom": _CUSTOM_TOOL, **{kind: dictionary for kind in SERVER_TOOL_TYPES},
                **{kind: _web_search_tool(kind) for kind in WEB_SEARCH_TYPES}}, default="custom")

_PARALLEL = {"disable_parallel_tool_use": boolean}
_TOOL_CHOICE = tagged({
    "auto": fields({"type": literal("auto")}, _PARALLEL),
    "any": fields({"type": literal("any")}, _PARALLEL),
    "tool": fields({"name": text, "type": literal("tool")}, _PARALLEL),
    "none": fields({"type": literal("none")}),
})

_DISPLAY = {"display": nullable(literal("summarized", "omitted"))}
_THINKING = tagged({
    "enabled": fields({"budget_tokens": integer(1024), "type": literal("enabled")}, _DISPLAY),
    "disabled": fields({"type": literal("disabled")}),
    "adaptive": fields({"type": literal("adaptive")}, _DISPLAY),
    "between_tools": fields({"type": literal("between_tools")}),
})

_OUTPUT_CONFIG = fields({}, {
    "effort": nullable(literal("low", "medium", "high", "xhigh", "max")),
    "format": nullable(fields({"schema": dictionary, "type": literal("json_schema")})),
})


def _messages(value: Any, where: Where) -> None:
    list_of(anything)(value, where)
    if not value:
        raise refuse(where, "at least one message is required")
    for index, message in enumerate(value):
        check_message(message, where.key(index), last=index == len(value) - 1)


_REQUIRED = ("model", "messages", "max_tokens")
_FIELDS: dict[str, Check] = {
    "model": text,
    "messages": _messages,
    # Anthropic takes 0 too, to warm its prompt cache without generating; a chat model has no cache to
    # warm, and chat servers refuse a cap of 0, so this server keeps the older bound.
    "max_tokens": integer(1),
    "cache_control": nullable(dictionary),
    "container": anything,
    "diagnostics": nullable(fields({}, {"previous_message_id": nullable(text)})),
    "inference_geo": nullable(text),
    "metadata": fields({}, {"user_id": nullable(text)}),
    "output_config": _OUTPUT_CONFIG,
    "service_tier": literal("auto", "standard_only"),
    "speed": nullable(literal("standard", "fast")),
    "stop_sequences": list_of(text),
    "stream": boolean,
    "system": check_system,
    "temperature": number(0, 1),
    "thinking": _THINKING,
    "tool_choice": _TOOL_CHOICE,
    "tools": list_of(_TOOL),
    "top_k": integer(0),
    "top_p": number(0, 1),
    "user_profile_id": text,
    "workspace_id": text,
    "context_management": nullable(dictionary),
    "mcp_servers": list_of(_MCP_SERVER),
}


def check_request(body: dict[str, Any]) -> None:
    """Raise contract.errors.InvalidRequestError for the first mistake in `body` that Anthropic
    refuses, worded as Anthropic words it ("messages.0.content.1.tool_result.tool_use_id: Field
    required", "max_tokens: Field required", "temperature: Input should be less than or equal to
    1"), with the field's path in the body as `param` ("messages.0.content.1.tool_use_id")."""
    for name in _REQUIRED:
        if name not in body:
            raise refuse(ROOT.key(name), "Field required")
    for name, value in body.items():  # the request's few fields, not every field there is
        check = _FIELDS.get(name)
        if check is None:
            raise refuse(ROOT.key(name), "Extra inputs are not permitted")
        check(value, ROOT.key(name))
    _check_tools(body)
    thinking = body.get("thinking")
    if thinking is not None and thinking["type"] == "enabled" and thinking["budget_tokens"] >= body["max_tokens"]:
        raise InvalidRequestError("`max_tokens` must be greater than `thinking.budget_tokens`.", param="thinking.budget_tokens")
    _check_tool_pairs(body["messages"])


def _check_tools(body: dict[str, Any]) -> None:
    names = [tool.get("name") for tool in body.get("tools") or ()]
    named = [name for name in names if name is not None]
    if len(set(named)) != len(named):
        raise refuse(ROOT.key("tools"), "Tool names must be unique.")
    servers = [server["name"] for server in body.get("mcp_servers") or ()]
    if len(set(servers)) != len(servers):
        raise refuse(ROOT.key("mcp_servers"), "MCP server names must be unique.")
    choice = body.get("tool_choice")
    if choice is not None and choice["type"] == "tool" and choice["name"] not in named:
        # Anthropic's wording of this one is not on record; the field is named as it names fields.
        raise refuse(Where("tool_choice.tool.name", "tool_choice.name"), f"Tool '{choice['name']}' not found in tools")


def _turns(messages: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """The user and assistant turns: runs of one role's messages (which Anthropic merges), by
    their indices; a system message stands between no turns."""
    turns: list[tuple[str, list[int]]] = []
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "system":
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].append(index)
        else:
            turns.append((role, [index]))
    return turns


def _blocks(message: dict[str, Any], kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
    content = message["content"]
    if isinstance(content, list):
        yield from ((number, block) for number, block in enumerate(content) if block["type"] == kind)


def _check_tool_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool use answered by a tool result in the next turn (when there is one), and every
    tool result answering a tool use of the turn before, with Anthropic's messages for both."""
    turns = _turns(messages)
    where = ROOT.key("messages")
    for position, (role, indices) in enumerate(turns):
        if role == "user":
            before = turns[position - 1][1] if position else []
            offered = {block["id"] for index in before for _, block in _blocks(messages[index], "tool_use")}
            for index in indices:
                for number, block in _blocks(messages[index], "tool_result"):
                    if block["tool_use_id"] not in offered:
                        raise refuse(where.key(index).key("content").key(number), (
                            f"unexpected `tool_use_id` found in `tool_result` blocks: {block['tool_use_id']}. Each `tool_result` block "
                            "must have a corresponding `tool_use` block in the previous message."))
        elif position + 1 < len(turns):
            after = turns[position + 1][1]
            answered = {block["tool_use_id"] for index in after for _, block in _blocks(messages[index], "tool_result")}
            for index in indices:
                missing = [block["id"] for _, block in _blocks(messages[index], "tool_use") if block["id"] not in answered]
                if missing:
                    raise refuse(where.key(index), (
                        f"`tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(missing)}. Each "
                        "`tool_use` block must have a corresponding `tool_result` block in the next message."))
