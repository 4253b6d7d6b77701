"""MCP's items in the OpenAI shapes, the request's tool filters, and how the items read to the model.

Pure functions: no I/O.

    mcp_list_tools        {id, server_label, tools: [{name, input_schema, description, annotations}], error}
    mcp_approval_request  {id, server_label, name, arguments}
    mcp_approval_response {approval_request_id, approve, reason}          (input)
    mcp_call              {id, server_label, name, arguments, status, output, error, approval_request_id}

An `mcp_call` whose tool returned images or files (which a string `output` cannot hold) also
carries `content`: those parts as Responses input parts, which the model is given beside the
output and which a chain replays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contract.tool_runtime.protocol import ToolExchange

__all__ = [
    "DECLINED",
    "ITEM_TYPES",
    "call_outcome",
    "error_text",
    "is_allowed",
    "needs_approval",
    "render",
    "tool_entry",
]

ITEM_TYPES = frozenset({"mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"})
DECLINED = "The user declined to run this tool call."


# --- tools and filters -------------------------------------------------------------------------


def tool_entry(tool: Any) -> dict[str, Any]:
    """An MCP `Tool` as `mcp_list_tools` lists it."""
    entry: dict[str, Any] = {"name": tool.name, "input_schema": tool.input_schema or {"type": "object"}}
    entry["description"] = tool.description
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations is not None else None
    entry["annotations"] = annotations or None
    return entry


def _matches(entry: Mapping[str, Any], selector: Any) -> bool:
    """A list of names, or a filter object {tool_names, read_only}; an empty filter matches all."""
    if isinstance(selector, list):
        return entry["name"] in selector
    if not isinstance(selector, Mapping):
        return False
    names, read_only = selector.get("tool_names"), selector.get("read_only")
    if names is not None and entry["name"] not in names:
        return False
    if read_only is not None and bool((entry.get("annotations") or {}).get("readOnlyHint")) != read_only:
        return False
    return True


def is_allowed(entry: Mapping[str, Any], allowed_tools: Any) -> bool:
    """Whether `allowed_tools` (absent: all) lets the model see this tool."""
    return allowed_tools is None or _matches(entry, allowed_tools)


def needs_approval(entry: Mapping[str, Any], require_approval: Any) -> bool:
    """OpenAI's rule: approval unless the request says otherwise (`never`, or a `never` filter
    that matches); with only an `always` filter, the tools it does not match run freely; a tool
    that both filters leave out asks."""
    if require_approval in (None, "always"):
        return True
    if require_approval == "never":
        return False
    never, always = require_approval.get("never"), require_approval.get("always")
    if never is not None and _matches(entry, never):
        return False
    if always is not None and _matches(entry, always):
        return True
    return always is None or never is not None


# --- a call's outcome ----------------------------------------------------------------------------


def call_outcome(result: Any) -> tuple[str, list[dict[str, Any]]]:
    """A `CallToolResult` as (output text, attachments): text blocks and text resources as text,
    images and PDFs as input parts (with a note in the text), structured content as JSON when
    there is no text."""
    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for block in result.content or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "image":
            attachments.append({"type": "input_image", "image_url": f"data:{block.mime_type};base64,{block.data}", "detail": "auto"})
            texts.append(f"[image: {block.mime_type}]")
        elif kind == "audio":
            texts.append(f"[audio: {block.mime_type}, not shown to the model]")
        elif kind == "resource_link":
            texts.append(f"[resource: {block.name} <{block.uri}>]")
        elif kind == "resource":
            texts.append(_resource_text(block.resource, attachments))
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(texts), attachments


def _resource_text(resource: Any, attachments: list[dict[str, Any]]) -> str:
    text = getattr(resource, "text", None)
    if text is not None:
        return str(text)
    mime = resource.mime_type or "application/octet-stream"
    blob = getattr(resource, "blob", "") or ""
    if mime.startswith("image/"):
        attachments.append({"type": "input_image", "image_url": f"data:{mime};base64,{blob}", "detail": "auto"})
    elif mime == "application/pdf":
        name = str(resource.uri).rstrip("/").rpartition("/")[2] or "resource.pdf"
        attachments.append({"type": "input_file", "filename": name, "file_data": f"data:{mime};base64,{blob}"})
    return f"[resource: {resource.uri} ({mime})]"


def error_text(error: Any) -> str:
    """An `mcp_call.error` as the model reads it (a client's item may carry any shape here)."""
    if isinstance(error, str) and error:
        return f"Error: {error}"
    if not isinstance(error, Mapping) or not error:
        return "Error: the tool call failed."
    if error.get("type") == "mcp_tool_execution_error":
        content = error.get("content") or []
        text = "\n".join(str(block.get("text", "")) for block in content if isinstance(block, Mapping) and block.get("text"))
        return f"Error: {text or 'the tool reported an error.'}"
    return f"Error: {error.get('message') or 'the tool call failed.'}"


# --- how the items read to the model ----------------------------------------------------------


def render(item: Mapping[str, Any]) -> ToolExchange | None:
    kind = item.get("type")
    if kind == "mcp_call":
        failed = item.get("status") == "failed" or item.get("error") is not None
        output = error_text(item.get("error")) if failed else str(item.get("output") or "")
        return ToolExchange(
            key=str(item.get("approval_request_id") or item.get("id")), name=str(item.get("name")),
            arguments=str(item.get("arguments") or "{}"), output=output,
            attachments=tuple(part for part in _list(item.get("content")) if isinstance(part, Mapping)),
        )
    if kind == "mcp_approval_request":
        return ToolExchange(key=str(item.get("id")), name=str(item.get("name")), arguments=str(item.get("arguments") or "{}"))
    if kind == "mcp_approval_response" and not item.get("approve"):
        reason = item.get("reason")
        return ToolExchange(key=str(item.get("approval_request_id")), output=f"{DECLINED} {reason}" if reason else DECLINED)
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def listed_tools(items: Sequence[Mapping[str, Any]], label: str) -> list[dict[str, Any]] | None:
    """The tools of the latest successful `mcp_list_tools` of `label` in a context, if any."""
    for item in reversed(items):
        if item.get("type") == "mcp_list_tools" and item.get("server_label") == label and not item.get("error"):
            return [dict(tool) for tool in _list(item.get("tools")) if isinstance(tool, Mapping) and tool.get("name")]
    return None
