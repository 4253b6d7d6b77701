"""Reasoning summaries (`reasoning.summary`: auto, concise, detailed): the reasoning text an
upstream returned, summarised by a model call (the request's model, or the responses provider's
`summary_model`, which may be a smaller one), and streamed as OpenAI streams a summary.

A summary that cannot be made (the model fails) leaves the item's `summary` empty; the response
goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from contract.errors import APIError

__all__ = ["SUMMARY_STYLES", "summarize", "summary_events"]

log = logging.getLogger("stack")

SUMMARY_STYLES = {
    "auto": "in two or three sentences",
    "concise": "in one short sentence",
    "detailed": "in one paragraph that covers each step of it",
}
MAX_SUMMARY_TOKENS = 300


class _Chat(Protocol):
    async def chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> bytes: ...


async def summarize(inference: _Chat, model: str, reasoning: str, style: str) -> str | None:
    """The summary of `reasoning`, or None when the model gives none."""
    instruction = (f"Summarize the reasoning the user gives you {SUMMARY_STYLES.get(style, SUMMARY_STYLES['auto'])}, in the first "
                   "person, as the one who reasoned. Write only the summary.")
    body = {"model": model, "messages": [{"role": "system", "content": instruction}, {"role": "user", "content": reasoning}],
            "max_completion_tokens": MAX_SUMMARY_TOKENS}
    try:
        answer = json.loads(await inference.chat_completion(body, echo_model=False))
        text = answer["choices"][0]["message"].get("content")
    except (APIError, ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
        log.warning("summarizing reasoning with %s failed: %s", model, error)
        return None
    return text.strip() if isinstance(text, str) and text.strip() else None


def summary_events(item: Mapping[str, Any], output_index: int, text: str) -> list[dict[str, Any]]:
    """The events of a summary part, in OpenAI's order, for the reasoning item being finished."""
    base = {"item_id": item["id"], "output_index": output_index, "summary_index": 0}
    return [
        {"type": "response.reasoning_summary_part.added", **base, "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **base, "delta": text},
        {"type": "response.reasoning_summary_text.done", **base, "text": text},
        {"type": "response.reasoning_summary_part.done", **base, "part": {"type": "summary_text", "text": text}},
    ]
