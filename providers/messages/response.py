"""A chat completion as an Anthropic Message (`message_from_chat`), and what the stream's
translation (`stream.py`) shares with it: ids, blocks, the stop reason and the usage. Pure: no I/O.

    reasoning_content (or reasoning)   a first `thinking` block, signed by `sign` ("" without it)
    content (and a refusal's text)     a `text` block, left out when empty; with `cited` (cited documents), the
                                       content's blocks split at its citation markers (`citations.cited_blocks`)
    tool_calls                         `tool_use` blocks: the call's id as a `toolu_` id, the arguments parsed (`{}`
                                       when they are not a JSON object)
    finish_reason stop / length /      stop_reason end_turn / max_tokens / tool_use / refusal; stop_sequence when
    tool_calls / content_filter        the choice's `stop_reason` (vLLM's matched stop) is one of the request's
    usage                              `input_tokens`: the prompt less its cached and cache-written tokens, which
                                       are `cache_read_input_tokens` and `cache_creation_input_tokens`
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from contract.ids import random_hex
from providers.messages.citations import CitedDocuments, cited_blocks

__all__ = ["REFUSAL_DETAILS", "message_from_chat", "message_usage", "new_message_id", "stop_reason", "thinking_block", "tool_input",
           "tool_use_id", "usage_counts"]

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
REFUSAL_DETAILS: dict[str, Any] = {"type": "refusal", "category": None, "explanation": None}
"""`stop_details` of a refusal: a chat upstream names no policy category."""


def new_message_id() -> str:
    """`msg_` and 24 random characters, the length of Anthropic's."""
    return f"msg_{random_hex(12)}"


def tool_use_id(call_id: Any) -> str:
    """A chat tool call's id as a tool use's: `toolu_` in place of `call_`, in Anthropic's
    alphabet (`[a-zA-Z0-9_-]`); the same call id always gives the same id, so a streamed answer
    and a whole one agree, and the id comes back as the `tool_call_id` the upstream gave."""
    if not isinstance(call_id, str) or not call_id.removeprefix("toolu_").removeprefix("call_"):
        return f"toolu_{random_hex(12)}"
    return _UNSAFE.sub("_", call_id if call_id.startswith("toolu_") else f"toolu_{call_id.removeprefix('call_')}")


def thinking_block(thinking: str, sign: Callable[[str], str] | None) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thinking, "signature": sign(thinking) if sign is not None else ""}


def tool_input(arguments: Any) -> dict[str, Any]:
    """A call's arguments as a tool use's `input`: the JSON object they hold, else `{}`."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(finish: Any, matched: Any, *, tool_use: bool, refused: bool, stop_sequences: Sequence[str]) -> tuple[str, str | None]:
    """Anthropic's `stop_reason` and `stop_sequence` for a choice's `finish_reason` (and the stop
    string vLLM reports it matched, in the choice's `stop_reason`)."""
    if finish == "length":
        return "max_tokens", None
    if finish == "content_filter" or refused:
        return "refusal", None
    if finish in ("tool_calls", "function_call") or tool_use:  # some servers finish a call with "stop"
        return "tool_use", None
    if isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    return "end_turn", None


def _count(value: Any) -> int:
    # type(), not isinstance(): a bool is no count (and this runs a few times a request).
    return value if type(value) is int and value > 0 else 0


_NONE: dict[str, Any] = {}


def usage_counts(usage: Any) -> dict[str, Any]:
    """A chat usage's counts as Anthropic's: the cached and cache-written prompt tokens apart from
    `input_tokens` (Anthropic's three add up to the prompt), and the reasoning tokens as
    `output_tokens_details.thinking_tokens` when the upstream reports them."""
    usage = usage if isinstance(usage, dict) else _NONE  # parsed JSON: a dict, never another Mapping
    prompt_details = usage.get("prompt_tokens_details")
    if isinstance(prompt_details, dict):
        cached, written = _count(prompt_details.get("cached_tokens")), _count(prompt_details.get("cache_write_tokens"))
    else:
        cached = written = 0
    counts: dict[str, Any] = {"input_tokens": max(_count(usage.get("prompt_tokens")) - cached - written, 0),
                              "cache_creation_input_tokens": written, "cache_read_input_tokens": cached,
                              "output_tokens": _count(usage.get("completion_tokens"))}
    completion_details = usage.get("completion_tokens_details")
    if isinstance(completion_details, dict) and isinstance(completion_details.get("reasoning_tokens"), int):
        counts["output_tokens_details"] = {"thinking_tokens": _count(completion_details["reasoning_tokens"])}
    return counts


def message_usage(usage: Any, *, input_tokens: int | None = None, output_tokens: int | None = None) -> dict[str, Any]:
    """A Message's `usage`, with the fields Anthropic's carry (one tier, no region named)."""
    counts = usage_counts(usage)
    written = counts["cache_creation_input_tokens"]
    result: dict[str, Any] = {
        "input_tokens": counts["input_tokens"] if input_tokens is None else input_tokens,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": counts["cache_read_input_tokens"],
        "cache_creation": {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": 0},
        "output_tokens": counts["output_tokens"] if output_tokens is None else output_tokens,
    }
    if "output_tokens_details" in counts:
        result["output_tokens_details"] = counts["output_tokens_details"]
    result["service_tier"] = "standard"
    result["inference_geo"] = "not_available"
    return result


def message_from_chat(completion: dict[str, Any], model: str, *, stop_sequences: Sequence[str] = (),
                      sign: Callable[[str], str] | None = None, cited: CitedDocuments | None = None) -> dict[str, Any]:
    """The Anthropic Message for a ChatCompletion JSON (already parsed); `cited`: the request's cited documents."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append(thinking_block(reasoning, sign))
    refusal = message.get("refusal") if isinstance(message.get("refusal"), str) else ""
    for text in (message.get("content"), refusal):
        if isinstance(text, str) and text:
            content += [{"type": "text", "text": text}] if cited is None else cited_blocks(text, cited)
    calls = [call for call in message.get("tool_calls") or () if isinstance(call, dict)]
    for call in calls:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": tool_use_id(call.get("id")), "name": str(function.get("name") or ""),
                        "input": tool_input(function.get("arguments"))})
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), tool_use=bool(calls),
                                   refused=bool(refusal), stop_sequences=stop_sequences)
    return {"id": new_message_id(), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "stop_details": dict(REFUSAL_DETAILS) if reason == "refusal" else None,
            "usage": message_usage(completion.get("usage"))}
