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
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from contract.errors import APIError, InvalidRequestError, UpstreamError
from contract.items import new_id, normalize_input
from contract.responses.models import CompactRequest
from providers.responses.context import ContextSource
from providers.responses.items import ChatContext, Renderer
from providers.responses.loop import ToolLoop
from providers.responses.model_calls import Inference
from providers.responses.sealing import ReasoningSeal, check_sealed
from providers.responses.translate import Event
from providers.responses.turn import Context, Turn
from providers.responses.usage import usage_from_chat

__all__ = ["Compaction", "compaction_summary", "estimated_tokens", "kept_messages"]

log = logging.getLogger("stack")

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


class Compaction:
    """Compacting contexts with the stack's models: on request (`compact`), and within a response
    whose context passed its threshold (`automatic`)."""

    def __init__(self, inference: Inference, contexts: ContextSource, seal: ReasoningSeal | None, renderers: Mapping[str, Renderer],
                 model: str | None = None) -> None:
        self.inference = inference
        self.contexts = contexts
        self.seal = seal
        self.renderers = renderers
        self.model = model

    async def compact(self, request: CompactRequest) -> dict[str, Any]:
        """POST /v1/responses/compact: the context of `request` (a chain, its input, or both) as
        the user's messages and one compaction item."""
        request.check()
        if self.seal is None:
            raise InvalidRequestError("This server cannot compact: it has no key to seal compaction items with.", param="model",
                                      code="invalid_value")
        await self.inference.resolve(request.model)
        context = await self.contexts.chain(request.previous_response_id) if request.previous_response_id else Context([], [])
        input_items = await self.contexts.resolve_references(normalize_input(request.input if request.input is not None else []))
        check_sealed(self.seal, input_items)
        items = [*context.items, *input_items]
        messages = ChatContext(renderers=self.renderers, reveal=self.seal.reveal).extend(items).messages_with(request.instructions)
        summary, usage = await compaction_summary(self.inference, self.model or str(request.model), messages)
        item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": self.seal.seal_compaction(summary)}
        return {"id": new_id("resp"), "object": "response.compaction", "created_at": int(time.time()),
                "output": [*kept_messages(items), item], "usage": usage_from_chat(usage or {"prompt_tokens": 0})}

    async def automatic(self, turn: Turn, loop: ToolLoop) -> list[Event]:
        """`context_management` compaction: a `compaction` item first in the output when the
        context passes `compact_threshold` tokens; the model then reads the compacted window."""
        threshold = turn.request.compact_threshold()
        if threshold is None or turn.refusal is not None or self.seal is None:
            return []
        messages = turn.messages()
        if estimated_tokens(messages) <= threshold:
            return []
        written = await try_compaction_summary(self.inference, self.model or str(turn.request.model), messages)
        if written is None:
            return []
        summary, usage = written
        if usage is not None:
            loop.usages.append(usage)
        item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": self.seal.seal_compaction(summary)}
        output = turn.response["output"]
        output.append(item)
        index = len(output) - 1
        return [{"type": "response.output_item.added", "output_index": index, "item": {**item, "encrypted_content": ""}},
                {"type": "response.compaction.compacting", "output_index": index, "item_id": item["id"]},
                {"type": "response.output_item.done", "output_index": index, "item": item}]
