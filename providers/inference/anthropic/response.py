"""An Anthropic Message as a ChatCompletion (pure functions): text blocks as the content, `tool_use`
blocks as tool calls, thinking as `reasoning_content` with the signed blocks in `thinking_blocks`,
the stop reason as a finish reason, and the usage with cached prompt tokens counted in."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["FINISH_REASONS", "chat_completion", "chat_usage", "finish_reason"]

FINISH_REASONS = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
    "model_context_window_exceeded": "length", "tool_use": "tool_calls", "refusal": "content_filter",
}


def finish_reason(stop_reason: Any, tool_calls: bool) -> str:
    """The chat finish reason of a stop reason; `tool_use` whose only call was the schema tool (an
    answer in `response_format`'s shape) is a "stop"."""
    reason = FINISH_REASONS.get(str(stop_reason), "stop")
    return "stop" if reason == "tool_calls" and not tool_calls else reason


def chat_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's usage: every input token in `prompt_tokens` (uncached, read from the cache, written
    to it), those read from the cache in `prompt_tokens_details.cached_tokens`."""
    cached = int(usage.get("cache_read_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + cached + int(usage.get("cache_creation_input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def chat_completion(message: Mapping[str, Any], schema_tool: str | None = None) -> dict[str, Any]:
    text: list[str] = []
    reasoning: list[str] = []
    blocks: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            text.append(str(block.get("text") or ""))
        elif kind == "thinking":
            reasoning.append(str(block.get("thinking") or ""))
            blocks.append({"type": "thinking", "thinking": str(block.get("thinking") or ""), "signature": str(block.get("signature") or "")})
        elif kind == "redacted_thinking":
            blocks.append({"type": "redacted_thinking", "data": str(block.get("data") or "")})
        elif kind == "tool_use" and block.get("name") == schema_tool:
            text.append(json.dumps(block.get("input") or {}, ensure_ascii=False))
        elif kind == "tool_use":
            calls.append({"id": str(block.get("id") or ""), "type": "function", "function": {
                "name": str(block.get("name") or ""), "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
    chat_message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None, "refusal": None}
    if calls:
        chat_message["tool_calls"] = calls
    if reasoning:
        chat_message["reasoning_content"] = "".join(reasoning)
    if blocks:
        chat_message["thinking_blocks"] = blocks
    return {
        "id": str(message.get("id") or ""),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(message.get("model") or ""),
        "choices": [{"index": 0, "message": chat_message, "logprobs": None,
                     "finish_reason": finish_reason(message.get("stop_reason"), bool(calls))}],
        "usage": chat_usage(message.get("usage") or {}),
    }
