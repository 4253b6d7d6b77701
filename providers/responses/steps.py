"""Steps of the tool loop that produce output items (a tool's preparation, a server-side call):
run concurrently under a bound, their events given out in output order.

A step opens items on the `ItemSink` it is given and emits their events; the earliest step still
running streams live, and the events of later steps wait until every earlier step's are out, so
items are announced in the model's order whichever step ends first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from contract.tool_runtime.protocol import ItemSink
from providers.responses.translate import Event

__all__ = ["UNDER_WAY", "StepItem", "run_steps"]

UNDER_WAY = frozenset({"in_progress", "calling", "searching", "interpreting", "generating"})
"""Item statuses of work still going on (each tool type has its own words)."""


class StepItem:
    """An item a step opened (implements contract.tool_runtime.protocol.OutputItem)."""

    __slots__ = ("item", "output_index", "_step")

    def __init__(self, step: _Sink, item: dict[str, Any]) -> None:
        self.item = item
        self.output_index = -1  # known once its `added` event goes out
        self._step = step

    def emit(self, event_type: str, **fields: Any) -> None:
        self._step.push(self, {"type": event_type, "item_id": self.item.get("id"), **fields})


class _Sink:
    """One step's items and its events not yet out (implements ItemSink)."""

    def __init__(self, steps: _Steps) -> None:
        self.steps = steps
        self.items: list[StepItem] = []
        self.pending: list[tuple[StepItem, Event | None]] = []  # (item, event); None: the item's `added`
        self.finished = False

    def open(self, item: dict[str, Any]) -> StepItem:
        opened = StepItem(self, item)
        self.items.append(opened)
        self.steps.running.append(opened)
        # The `added` event shows the item as it was opened, whenever it goes out.
        self.push(opened, {"type": "response.output_item.added", "item": dict(item)})
        return opened

    def push(self, item: StepItem, event: Event) -> None:
        self.pending.append((item, event))
        self.steps.flush()


class _Steps:
    """Steps in output order; the earliest unfinished one streams live, the rest wait."""

    def __init__(self, output: list[dict[str, Any]], running: list[StepItem]) -> None:
        self.output = output
        self.running = running
        self.sinks: list[_Sink] = []
        self.head = 0
        self.ready: asyncio.Queue[Event | None] = asyncio.Queue()

    def flush(self) -> None:
        while self.head < len(self.sinks):
            sink = self.sinks[self.head]
            for item, event in sink.pending:
                assert event is not None
                if event["type"] == "response.output_item.added":
                    item.output_index = len(self.output)
                    self.output.append(item.item)
                event["output_index"] = item.output_index
                self.ready.put_nowait(event)
            sink.pending.clear()
            if not sink.finished:
                return
            for item in sink.items:
                self.ready.put_nowait({"type": "response.output_item.done", "output_index": item.output_index, "item": item.item})
                if item in self.running:
                    self.running.remove(item)
            self.head += 1
        self.ready.put_nowait(None)


async def run_steps(steps: Sequence[Callable[[ItemSink], Awaitable[None]]], output: list[dict[str, Any]], parallel: int,
                    running: list[StepItem] | None = None) -> AsyncIterator[Event]:
    """Run `steps` concurrently (at most `parallel` at once); their events in output order.

    A step's failure is its own business (tools record failures on their items); an exception
    that escapes a step is a bug of that tool and stops the others."""
    if not steps:
        return
    state = _Steps(output, running if running is not None else [])
    state.sinks = [_Sink(state) for _ in steps]
    gate = asyncio.Semaphore(parallel)

    async def run(sink: _Sink, step: Callable[[ItemSink], Awaitable[None]]) -> None:
        try:
            async with gate:
                await step(sink)
        except asyncio.CancelledError:
            for item in sink.items:  # stopped midway: what it produced is kept, marked so
                if item.item.get("status") in UNDER_WAY:
                    item.item["status"] = "incomplete"
            raise
        finally:
            sink.finished = True
            state.flush()

    tasks = [asyncio.create_task(run(sink, step)) for sink, step in zip(state.sinks, steps, strict=True)]
    try:
        while (event := await state.ready.get()) is not None:
            yield event
        await asyncio.gather(*tasks)  # a step that raised (a tool's bug) fails the response
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
