"""Responses input items: checked, normalised to their full form, and turned into chat messages.

Pure functions: no I/O. An `item_reference` is resolved by the caller (it needs the store) before
`chat_messages` sees the list.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from runtime.errors import InvalidRequestError

__all__ = ["chat_messages", "new_id", "normalize_input"]

_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
_INPUT_ROLES = ("user", "system", "developer", "assistant")
_PART_TYPES = {
    "input_text": ("text",),
    "input_image": (),
    "input_file": (),
    "output_text": ("text",),
    "refusal": ("refusal",),
    "reasoning_text": ("text",),
    "summary_text": ("text",),
}
# Items of server-side tools (later issues run them): kept and replayed as context, never invented.
_PASSIVE_TYPES = frozenset({
    "web_search_call", "file_search_call", "mcp_call", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "computer_call", "computer_call_output", "code_interpreter_call",
    "image_generation_call", "local_shell_call", "local_shell_call_output", "custom_tool_call",
    "custom_tool_call_output", "compaction",
})


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def normalize_input(raw: Any) -> list[dict[str, Any]]:
    """The request's `input` as a list of full items, each with an id; 400 for anything malformed."""
    if isinstance(raw, str):
        return [_message("user", [{"type": "input_text", "text": raw}])]
    if not isinstance(raw, list):
        raise InvalidRequestError("Invalid type for 'input': expected a string or an array of input items.", param="input", code="invalid_type")
    return [_normalize_item(item, f"input[{index}]") for index, item in enumerate(raw)]


def _message(role: str, content: list[dict[str, Any]], item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or new_id("msg"), "type": "message", "role": role, "content": content, "status": status}


def _normalize_item(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise InvalidRequestError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _normalize_message(item, where)
    if kind == "function_call":
        _require(item, where, ("call_id", "name", "arguments"))
        return {"status": "completed", **item, "type": "function_call", "id": item.get("id") or new_id("fc")}
    if kind == "function_call_output":
        _require(item, where, ("call_id", "output"))
        return {"status": "completed", **item, "id": item.get("id") or new_id("fco")}
    if kind == "reasoning":
        return {"summary": [], **item, "id": item.get("id") or new_id("rs")}
    if kind == "item_reference":
        _require(item, where, ("id",))
        return {"type": "item_reference", "id": item["id"]}
    if kind in _PASSIVE_TYPES:
        return dict(item)
    raise InvalidRequestError(f"Invalid value for '{where}.type': unknown input item type {kind!r}.", param=f"{where}.type", code="invalid_value")


def _require(item: Mapping[str, Any], where: str, keys: Iterable[str]) -> None:
    for key in keys:
        if item.get(key) is None:
            raise InvalidRequestError(f"Missing required parameter: '{where}.{key}'.", param=f"{where}.{key}", code="missing_required_parameter")


def _normalize_message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise InvalidRequestError(
            f"Invalid value for '{where}.role': expected one of {', '.join(_INPUT_ROLES)}, got {role!r}.", param=f"{where}.role", code="invalid_value"
        )
    content = item.get("content")
    text_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        parts = [{"type": text_type, "text": content, **({"annotations": []} if role == "assistant" else {})}]
    elif isinstance(content, list):
        parts = [_normalize_part(part, f"{where}.content[{index}]") for index, part in enumerate(content)]
    else:
        raise InvalidRequestError(f"Invalid type for '{where}.content': expected a string or an array of content parts.", param=f"{where}.content", code="invalid_type")
    return _message(str(role), parts, item.get("id"), str(item.get("status") or "completed"))


def _normalize_part(part: Any, where: str) -> dict[str, Any]:
    if not isinstance(part, Mapping):
        raise InvalidRequestError(f"Invalid type for '{where}': expected a content part object.", param=where, code="invalid_type")
    kind = part.get("type")
    if kind not in _PART_TYPES:
        raise InvalidRequestError(
            f"Invalid value for '{where}.type': unknown content part type {kind!r} (expected one of: {', '.join(_PART_TYPES)}).",
            param=f"{where}.type", code="invalid_value",
        )
    for key in _PART_TYPES[kind]:
        if not isinstance(part.get(key), str):
            raise InvalidRequestError(f"Missing required parameter: '{where}.{key}'.", param=f"{where}.{key}", code="missing_required_parameter")
    if kind == "input_image" and not (part.get("image_url") or part.get("file_id")):
        raise InvalidRequestError(f"Missing required parameter: '{where}.image_url' (or file_id).", param=f"{where}.image_url", code="missing_required_parameter")
    if kind == "output_text":
        return {"annotations": [], **part}
    return dict(part)


# --- to chat messages ----------------------------------------------------------------------


def chat_messages(items: Iterable[Mapping[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """Chat Completions messages for a model context made of Responses items, in order.

    Consecutive function calls become one assistant message with several tool calls (how chat
    models emit parallel calls); reasoning items travel as `reasoning_content` on the assistant
    message they precede, which reasoning-aware servers read and others ignore."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    pending_reasoning: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            message = _chat_message(item)
            if message["role"] == "assistant" and pending_reasoning:
                message["reasoning_content"] = "".join(pending_reasoning)
                pending_reasoning = []
            messages.append(message)
        elif kind == "function_call":
            _append_tool_call(messages, item)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _output_text(item["output"])})
        elif kind == "reasoning":
            pending_reasoning.extend(_reasoning_text(item))
    return messages


def _chat_message(item: Mapping[str, Any]) -> dict[str, Any]:
    role = item["role"]
    parts = item["content"]
    if role == "assistant":
        text = "".join(part.get("text", "") for part in parts if part["type"] == "output_text")
        refusal = "".join(part.get("refusal", "") for part in parts if part["type"] == "refusal")
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if refusal:
            message["refusal"] = refusal
        return message
    if all(part["type"] == "input_text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": [_chat_part(part) for part in parts]}


def _chat_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part["type"]
    if kind == "input_image":
        image: dict[str, Any] = {"url": part.get("image_url") or part.get("file_id")}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        file = {key: part[key] for key in ("file_id", "file_data", "filename") if part.get(key)}
        if part.get("file_url") and "file_data" not in file:
            file["file_data"] = part["file_url"]
        return {"type": "file", "file": file}
    return {"type": "text", "text": part.get("text", "")}


def _append_tool_call(messages: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    arguments = item["arguments"] if isinstance(item["arguments"], str) else json.dumps(item["arguments"])
    call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": arguments}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant" and last.get("content") is not None:
        last["tool_calls"] = [call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(part.get("text", "") for part in output if isinstance(part, Mapping))
    return json.dumps(output)


def _reasoning_text(item: Mapping[str, Any]) -> list[str]:
    parts = item.get("content") or item.get("summary") or []
    return [part.get("text", "") for part in parts if isinstance(part, Mapping)]
