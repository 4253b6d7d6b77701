"""Compaction: a long context replaced by the user's messages and one `compaction` item, whose
sealed content is a summary of everything else, written by a model call (the request's model, or
the responses provider's `compaction_model`).

`POST /v1/responses/compact` returns such a window for the client to send on; a create request
with `context_management: [{"type": "compaction", "compact_threshold": N}]` compacts its own
context when it passes N tokens, before the model answers. Wherever a compaction item appears in a
context (sent back, or in a chain's stored output), the model reads the user's messages before it
and the summary in place of everything else before it (providers/responses/items.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from runtime.errors import APIError, UpstreamError

__all__ = ["SUMMARY_HEADER", "compaction_summary", "estimated_tokens", "kept_messages"]

log = logging.getLogger("stack")

SUMMARY_HEADER = "A summary of the conversation so far, which replaces its earlier turns:"
MAX_SUMMARY_TOKENS = 2000
_INSTRUCTION = (
    "You compact a conversation so that it can go on in a smaller context. Write a summary of everything in it that the assistant "
    "will need to continue: the user's goals and requests, what was decided and done, facts and results learned (tool calls "
    "and what they returned), and what is still open. Keep names, numbers, paths and identifiers exactly. Write only the summary.")


class _Chat(Protocol):
    async def chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> bytes: ...


def estimated_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """About how many tokens `messages` take: a quarter of their JSON's length (no tokenizer is
    at hand for every upstream model; it decides when to compact, nothing more)."""
    return len(json.dumps(messages, separators=(",", ":"))) // 4


def _transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
        if content:
            lines.append(f"{message.get('role')}: {content}")
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            lines.append(f"assistant called {function.get('name')}({function.get('arguments')})")
    return "\n\n".join(lines)


async def compaction_summary(inference: _Chat, model: str, messages: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """The summary of a context, and the usage of the call that wrote it. Raises an UpstreamError
    (502) when the model gives none."""
    body = {"model": model, "max_completion_tokens": MAX_SUMMARY_TOKENS, "messages": [
        {"role": "system", "content": _INSTRUCTION}, {"role": "user", "content": _transcript(messages)}]}
    answer = json.loads(await inference.chat_completion(body, echo_model=False))
    try:
        text = answer["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        text = None
    if not isinstance(text, str) or not text.strip():
        raise UpstreamError(f"The compaction model ({model}) gave no summary.", status_code=502, code="upstream_error")
    return text.strip(), answer.get("usage") if isinstance(answer.get("usage"), dict) else None


async def try_compaction_summary(inference: _Chat, model: str, messages: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any] | None] | None:
    """`compaction_summary`, or None (logged) when it cannot be made: automatic compaction then
    leaves the context whole rather than fail the response."""
    try:
        return await compaction_summary(inference, model, messages)
    except (APIError, ValueError) as error:
        log.warning("compacting a context with %s failed; it is sent whole: %s", model, error)
        return None


def kept_messages(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The user's messages of a context, in order: what a compacted window keeps as they were."""
    return [dict(item) for item in items if item.get("type", "message") == "message" and item.get("role") == "user"]
