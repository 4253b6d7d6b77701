"""A checked Messages request as a chat completions body: pure, no I/O.

    system (a string or text blocks)      the first message, `system`: one block as a string, several as text parts
    messages, consecutive ones of a role  one message, as Anthropic merges them into one turn
    a user's blocks                       a `user` message's parts (`parts.py`)
    a user's tool_result blocks           `tool` messages (`tool_call_id`: the `tool_use_id`) before the user's other
                                          content; a result's images and files follow in the user message (a chat tool
                                          takes text only); `is_error` as an "Error: " heading
    an assistant's text / tool_use        its `content` / `tool_calls` (the block's id, the name, the input as JSON)
    an assistant's thinking               its `reasoning_content`; a `redacted_thinking` block's text when `reveal`
                                          reads its data, else nothing
    a system message in messages          a `system` message where it stands
    max_tokens                            `max_completion_tokens`
    stop_sequences, temperature, top_p,   `stop`, `temperature`, `top_p`, `top_k` (vLLM's and Ollama's extra field)
    top_k
    metadata.user_id                      `user`
    tools (custom ones)                   function tools, `input_schema` as their `parameters`
    tool_choice auto / any / tool / none  `auto` / `required` / the named function / `none`;
                                          `disable_parallel_tool_use` as `parallel_tool_calls: false`
    thinking enabled / adaptive /         `reasoning_effort` by the budget (under 4,096 low, under 16,384 medium, else
    disabled                              high) / medium / none
    output_config                         `effort` as `reasoning_effort` (xhigh and max as high); `format` as a
                                          `json_schema` `response_format`
    stream                                `stream`, with `stream_options.include_usage` for the usage of the last chunk
    documents with citations enabled      numbered sentences, and the system message asking for their markers, when
                                          `cited` (`citations.cited_documents`) is given (`citations.py`)

Left out: `cache_control` (a chat upstream has no prompt cache to mark), `service_tier` ("auto" and
"standard_only" both mean the one tier a chat upstream has), `speed`, `container`, `diagnostics`,
`inference_geo`, `context_management`, and the tools of Anthropic's own types
(`checks.SERVER_TOOL_TYPES`), which are the caller's to run or refuse. A request with `mcp_servers`
or a web search tool never comes here: the responses provider runs them (`via_responses.py`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from contract import fastjson
from providers.messages.citations import INSTRUCTION, CitedDocuments
from providers.messages.parts import ToolResult, user_parts

__all__ = ["chat_body", "chat_messages", "reasoning_effort"]

_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def chat_body(body: dict[str, Any], model: str, *, stream: bool, reveal: Callable[[str], str | None] | None = None,
              cited: CitedDocuments | None = None) -> dict[str, Any]:
    """The chat completions body for a checked Messages request, `model` being the model id to call;
    `cited`: the state of its cited documents, built from this `body`."""
    chat: dict[str, Any] = {"model": model, "messages": chat_messages(body, reveal, cited), "max_completion_tokens": body["max_tokens"]}
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            chat[name] = body[name]
    user = (body.get("metadata") or {}).get("user_id")
    if isinstance(user, str):
        chat["user"] = user
    chat.update(_tools(body))
    effort = reasoning_effort(body)
    if effort is not None:
        chat["reasoning_effort"] = effort
    output_format = (body.get("output_config") or {}).get("format")
    if output_format is not None:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": output_format["schema"]}}
    return chat


def chat_messages(body: Mapping[str, Any], reveal: Callable[[str], str | None] | None = None,
                  cited: CitedDocuments | None = None) -> list[dict[str, Any]]:
    """The request's `system` and `messages` as chat messages."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append(_system(body["system"]))
    if cited is not None:
        _instruct(messages)
    for role, run in itertools.groupby(body["messages"], key=lambda message: str(message["role"])):
        group = list(run)
        if role == "system":
            messages += [_system(message["content"]) for message in group]
            continue
        blocks = [block for message in group for block in _blocks(message["content"])]
        if role == "user":
            messages += _user(blocks, cited)
        else:
            messages.append(_assistant(blocks, reveal))
    return messages


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _system(content: str | list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "system", "content": content}
    texts = [block["text"] for block in content]
    return {"role": "system", "content": texts[0] if len(texts) == 1 else [{"type": "text", "text": text} for text in texts]}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text part as a string (what every chat server reads), else the parts."""
    return parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts


def _instruct(messages: list[dict[str, Any]]) -> None:
    """The citation instruction at the end of the system message (one made for it when there is none)."""
    if not messages:
        messages.append({"role": "system", "content": INSTRUCTION})
    elif isinstance(messages[0]["content"], str):
        messages[0]["content"] += f"\n\n{INSTRUCTION}"
    else:
        messages[0]["content"].append({"type": "text", "text": INSTRUCTION})


def _user(blocks: Iterable[dict[str, Any]], cited: CitedDocuments | None = None) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "tool_result":
            result = ToolResult(block)
            tools.append(result.message)
            parts += result.parts
        else:
            rest += (cited.parts(block) if cited is not None else None) or user_parts(block)
    parts += rest
    if parts or not tools:
        tools.append({"role": "user", "content": _content(parts)})
    return tools


def _assistant(blocks: Iterable[dict[str, Any]], reveal: Callable[[str], str | None] | None) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block["type"]
        if kind == "text":
            texts.append(block["text"])
        elif kind == "thinking":
            thoughts.append(block["thinking"])
        elif kind == "redacted_thinking":
            revealed = reveal(block["data"]) if reveal is not None else None
            thoughts.append(revealed or "")
        elif kind == "tool_use":  # a server tool's blocks go through the responses provider (server_tools.py), never here
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": fastjson.dumps(block["input"]).decode()}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    thinking = "\n\n".join(thought for thought in thoughts if thought)
    if thinking:
        message["reasoning_content"] = thinking
    return message


def _tools(body: Mapping[str, Any]) -> dict[str, Any]:
    functions = [_function(tool) for tool in body.get("tools") or () if tool.get("type") in (None, "custom")]
    if not functions:
        return {}
    chat: dict[str, Any] = {"tools": functions}
    choice = body.get("tool_choice")
    if choice is None:
        return chat
    if choice["type"] != "tool":
        chat["tool_choice"] = _CHOICES[choice["type"]]
    elif any(function["function"]["name"] == choice["name"] for function in functions):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False
    return chat


def _function(tool: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def reasoning_effort(body: Mapping[str, Any]) -> str | None:
    """The reasoning effort `thinking` and `output_config.effort` ask for (None: no reasoning asked)."""
    thinking = body.get("thinking") or {}
    kind = thinking.get("type")
    if kind == "disabled":
        return None
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None:
        return _EFFORTS[effort]
    if kind == "enabled":
        budget = thinking["budget_tokens"]
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    return "medium" if kind in ("adaptive", "between_tools") else None
