"""The Responses output items a model call builds, and their stream events: an item and its
content parts as they grow (`OutputItem`, `ContentPart`), and the events that add to them and
close them. Pure functions over that state; the order they are called in (which event follows
which) is the StreamTranslator's (translate.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.tool_runtime.protocol import Citations
from providers.responses.client_tools import ClientTool

__all__ = [
    "ContentPart", "Event", "OutputItem", "annotation_events", "close_call", "close_part", "delta_event", "logprobs_of",
    "new_text_item", "part_body", "part_event",
]

Event = dict[str, Any]


@dataclass
class ContentPart:
    kind: str  # output_text | refusal | reasoning_text
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)
    citations: Citations | None = None
    released: int = 0
    """How much of the text clients have been sent (the output guardrail holds the rest)."""


@dataclass
class OutputItem:
    output_index: int
    item: dict[str, Any]
    parts: list[ContentPart] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    client: ClientTool | None = None
    """The client tool of a call whose item is of that tool's own type (not a function_call)."""


def new_text_item(item_type: str, make_id: Callable[[str], str]) -> dict[str, Any]:
    """A new reasoning or (assistant) message item, in progress and empty."""
    if item_type == "reasoning":
        return {"id": make_id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
    return {"id": make_id("msg"), "type": "message", "role": "assistant", "content": [], "status": "in_progress"}


def part_body(part: ContentPart, *, done: bool) -> dict[str, Any]:
    """A content part as an item holds it: empty while it is added, whole once it is done."""
    text = "".join(part.text) if done else ""
    if part.kind == "refusal":
        return {"type": "refusal", "refusal": text}
    if part.kind == "reasoning_text":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": list(part.annotations) if done else [],
            "logprobs": list(part.logprobs) if done else []}


def part_event(kind: str, item: OutputItem, part: dict[str, Any]) -> Event:
    """A content_part event (`kind`) of the item's last part."""
    return {"type": kind, "item_id": item.item["id"], "output_index": item.output_index,
            "content_index": len(item.parts) - 1, "part": part}


def delta_event(item: OutputItem, part: ContentPart, text: str, logprobs: list[dict[str, Any]]) -> Event:
    """The delta event of `text` added to the item's last part, of that part's kind."""
    base = {"item_id": item.item["id"], "output_index": item.output_index, "content_index": len(item.parts) - 1, "delta": text}
    if part.kind == "output_text":
        return {"type": "response.output_text.delta", **base, "logprobs": logprobs}
    if part.kind == "refusal":
        return {"type": "response.refusal.delta", **base}
    return {"type": "response.reasoning_text.delta", **base}


def annotation_events(item: OutputItem, part: ContentPart, annotations: list[dict[str, Any]]) -> list[Event]:
    """The annotations added to the item's last part, and their events."""
    events: list[Event] = []
    for annotation in annotations:
        events.append({"type": "response.output_text.annotation.added", "item_id": item.item["id"], "output_index": item.output_index,
                       "content_index": len(item.parts) - 1, "annotation_index": len(part.annotations), "annotation": annotation})
        part.annotations.append(annotation)
    return events


def close_part(item: OutputItem) -> list[Event]:
    """The events that end the item's last part: the text its citations still held, then its
    `.done` and `content_part.done`. None if the item has no part."""
    if not item.parts:
        return []
    part = item.parts[-1]
    events: list[Event] = []
    if part.citations is not None:
        held, annotations = part.citations.finish()
        part.citations = None
        if held:
            part.text.append(held)
            events.append(delta_event(item, part, held, []))
        events += annotation_events(item, part, annotations)
    text = "".join(part.text)
    base = {"item_id": item.item["id"], "output_index": item.output_index, "content_index": len(item.parts) - 1}
    if part.kind == "output_text":
        done: Event = {"type": "response.output_text.done", **base, "text": text, "logprobs": list(part.logprobs)}
    elif part.kind == "refusal":
        done = {"type": "response.refusal.done", **base, "refusal": text}
    else:
        done = {"type": "response.reasoning_text.done", **base, "text": text}
    return [*events, done, {"type": "response.content_part.done", **base, "part": part_body(part, done=True)}]


def close_call(call: OutputItem, status: str) -> list[Event]:
    """The events that end a function_call item, its arguments whole."""
    arguments = "".join(call.arguments)
    call.item.update(arguments=arguments, status=status)
    return [
        {"type": "response.function_call_arguments.done", "item_id": call.item["id"], "output_index": call.output_index,
         "name": call.item["name"], "arguments": arguments},
        {"type": "response.output_item.done", "output_index": call.output_index, "item": call.item},
    ]


def logprobs_of(choice: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat choice's token log probabilities in the Responses shape."""
    content = (choice.get("logprobs") or {}).get("content") or []
    return [
        {"token": entry.get("token", ""), "logprob": entry.get("logprob", 0.0), "bytes": entry.get("bytes") or [],
         "top_logprobs": [{"token": top.get("token", ""), "logprob": top.get("logprob", 0.0), "bytes": top.get("bytes") or []}
                          for top in entry.get("top_logprobs") or ()]}
        for entry in content
    ]
