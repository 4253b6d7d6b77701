"""Responses items as Chat Completions messages (pure functions)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["chat_messages"]


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
