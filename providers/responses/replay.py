"""A finished response as the event stream that would have produced it, for
`GET /v1/responses/{id}?stream=true` on responses whose live events were not kept."""

from __future__ import annotations

from typing import Any

from providers.responses.translate import PART_EVENTS, Event

__all__ = ["replay_events"]

_TERMINAL_EVENT = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


def replay_events(response: dict[str, Any]) -> list[Event]:
    """Events numbered from 0: created, in_progress, each output item whole, the terminal event."""
    start = {**response, "status": "in_progress", "output": [], "usage": None, "completed_at": None}
    events: list[Event] = [{"type": "response.created", "response": start}, {"type": "response.in_progress", "response": start}]
    for index, item in enumerate(response.get("output") or []):
        events += _item_events(index, item)
    terminal = _TERMINAL_EVENT.get(response.get("status", ""))
    if terminal:
        events.append({"type": terminal, "response": response})
    numbered = [{**event, "sequence_number": number} for number, event in enumerate(events)]
    for event in numbered:
        if event["type"] in PART_EVENTS:
            event["response_id"] = response["id"]
    return numbered


def _item_events(index: int, item: dict[str, Any]) -> list[Event]:
    kind = item.get("type")
    if kind == "function_call":
        opened = {**item, "status": "in_progress", "arguments": ""}
        base = {"item_id": item["id"], "output_index": index}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": opened},
            {"type": "response.function_call_arguments.delta", **base, "delta": item.get("arguments", "")},
            {"type": "response.function_call_arguments.done", **base, "name": item.get("name"), "arguments": item.get("arguments", "")},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    if kind not in ("message", "reasoning"):
        return [{"type": "response.output_item.added", "output_index": index, "item": item},
                {"type": "response.output_item.done", "output_index": index, "item": item}]
    events: list[Event] = [{"type": "response.output_item.added", "output_index": index, "item": {**item, "status": "in_progress", "content": []}}]
    for part_index, part in enumerate(item.get("content") or []):
        events += _part_events(item["id"], index, part_index, part)
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def _part_events(item_id: str, index: int, part_index: int, part: dict[str, Any]) -> list[Event]:
    base = {"item_id": item_id, "output_index": index, "content_index": part_index}
    kind = part.get("type")
    empty = {**part, "text": ""} if "text" in part else {**part, "refusal": ""}
    if kind == "output_text":
        empty["logprobs"] = []
        middle = [{"type": "response.output_text.delta", **base, "delta": part["text"], "logprobs": part.get("logprobs") or []},
                  {"type": "response.output_text.done", **base, "text": part["text"], "logprobs": part.get("logprobs") or []}]
    elif kind == "refusal":
        middle = [{"type": "response.refusal.delta", **base, "delta": part["refusal"]},
                  {"type": "response.refusal.done", **base, "refusal": part["refusal"]}]
    else:
        middle = [{"type": "response.reasoning_text.delta", **base, "delta": part.get("text", "")},
                  {"type": "response.reasoning_text.done", **base, "text": part.get("text", "")}]
    return [{"type": "response.content_part.added", **base, "part": empty}, *middle,
            {"type": "response.content_part.done", **base, "part": part}]
