"""One response being produced (`Turn`), as preparation hands it to the engine, and what it
continues from (`Context`).

A turn is built whole by preparation (`providers/responses/preparation.py`) and then only read:
its request, its context folded into chat messages once, the refusal of its input guardrail, its
tools opened and prepared. The one thing that grows is the response itself (its `output`, then its
status and usage), which the engine produces and persistence stores.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.responses.models import CreateResponse
from providers.responses.items import ChatContext, Renderer, Reveal, chat_messages
from providers.responses.loop import Hidden
from providers.responses.tools import RequestTools
from providers.responses.translate import PART_EVENTS, Event

__all__ = ["Context", "Turn"]


@dataclass(frozen=True)
class Context:
    """What a turn continues from: the previous responses' ids (root first) and their items,
    and, when known, those items already folded into chat messages."""

    ancestors: list[str]
    items: list[dict[str, Any]]
    chat: ChatContext | None = None


@dataclass(frozen=True)
class Turn:
    """One response being produced."""

    request: CreateResponse
    response: dict[str, Any]
    """The response object; its output grows as the engine produces it."""
    input_items: list[dict[str, Any]]
    history: list[dict[str, Any]]
    """Items before this turn's input: the previous_response_id chain or the conversation."""
    ancestors: list[str]
    chat: ChatContext
    """History and input folded into chat messages (files named by id read in)."""
    seen: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
    """History and input as the model sees them, when files named by id had to be read in: what
    truncation folds again when it drops the oldest items."""
    renderers: Mapping[str, Renderer] = field(default_factory=dict)
    reveal: Reveal | None = None
    refusal: str | None = None
    """Set when the input guardrail flagged this turn's input: the answer is this refusal, and no
    model sees the input."""
    guard_output: bool = False
    """Whether the output guardrail checks what the model answers."""
    tools: RequestTools | None = None
    """The request's tools, opened and prepared, when it has server-side ones (a background
    response opens them when it runs: `Turn.tools` is then None)."""
    prepared: tuple[Event, ...] = ()
    """The events of the tools' preparation, which ran before the response started."""
    sequence: Callable[[], int] = field(default_factory=lambda: itertools.count().__next__)

    @property
    def stored(self) -> bool:
        return bool(self.response["store"])

    @property
    def droppable(self) -> int:
        """How many of the oldest context items truncation may drop: all but the newest input."""
        return max(0, len(self.history) + len(self.input_items) - 1)

    def messages(self, dropped: int = 0, hidden: Hidden = ()) -> list[dict[str, Any]]:
        """The chat messages of the model context (and of the output so far, in a tool loop, with
        the `hidden` items only the model sees), without its `dropped` oldest items. Files named by
        id read as their content (`seen`)."""
        output = self.response["output"]
        if hidden:
            output = _with_hidden(output, hidden)
        if dropped:
            history, input_items = self.seen if self.seen is not None else (self.history, self.input_items)
            return chat_messages([*history, *input_items, *output][dropped:], self.request.instructions, self.renderers, self.reveal)
        return (self.chat.extend(output) if output else self.chat).messages_with(self.request.instructions)

    def event(self, kind: str) -> Event:
        """A `response.*` event with a snapshot of the response as it stands."""
        snapshot = {**self.response, "output": list(self.response["output"])}
        if kind in ("response.created", "response.in_progress"):
            snapshot["output"] = []  # items are announced by their own events (prepared ones too)
        return {"type": kind, "sequence_number": self.sequence(), "response": snapshot}

    def numbered(self, event: Event) -> Event:
        """An output event, numbered in the response's sequence (the translator's events are fresh
        dicts: numbered in place)."""
        event["sequence_number"] = self.sequence()
        if event["type"] in PART_EVENTS:
            event["response_id"] = self.response["id"]
        return event


def _with_hidden(output: Sequence[dict[str, Any]], hidden: Hidden) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    start = 0
    for position, item in hidden:
        merged += output[start:position]
        start = max(start, position)
        merged.append(dict(item))
    return merged + list(output[start:])
