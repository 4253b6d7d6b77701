"""Chat Completions output to Responses output items and stream events, as pure functions over a
small state object. Events carry no sequence numbers: whoever emits them numbers them.

Order for each output item (as OpenAI streams it):
    reasoning:     output_item.added, content_part.added(reasoning_text), reasoning_text.delta...,
                   reasoning_text.done, content_part.done, output_item.done
    message:       output_item.added, content_part.added(output_text), output_text.delta...,
                   output_text.done, content_part.done, [same for a refusal part], output_item.done
    function_call: output_item.added, function_call_arguments.delta..., function_call_arguments.done,
                   output_item.done
    custom_tool_call: output_item.added, custom_tool_call_input.delta, custom_tool_call_input.done,
                   output_item.done (all once the call is whole: the model streams JSON arguments,
                   the input is a string inside them)
    shell_call:    output_item.added, then per command shell_call_command.added, .delta, .done, then
                   output_item.done (likewise)
    apply_patch_call, local_shell_call, tool_search_call: output_item.added, output_item.done (likewise)

A custom tool call whose input its tool's grammar does not accept is not output at all: it is set
aside in `rejected`, for the tool loop to send back to the model. So that setting it aside leaves
no gap, such a call takes its output index only once it is whole and accepted, after the items
of its model turn that came before that.

This module owns the state machine (`StreamTranslator`: which event follows which, the output
guardrail's hold); the items, their parts and the events themselves are built in output_events,
the usage converted in usage.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from providers.responses.client_tools import ClientTool
from providers.responses.output_events import (
    ContentPart, Event, OutputItem, annotation_events, close_call, close_part, delta_event, logprobs_of, new_text_item, part_body,
    part_event)
from providers.responses.usage import upstream_usage
from contract.items import new_id
from contract.tool_runtime.protocol import Citations
from runtime.apis.inference.chunks import upstream_shape

__all__ = ["PART_EVENTS", "Event", "RejectedCall", "ServerCall", "StreamTranslator", "output_from_completion"]

_HELD_DELTAS = frozenset({"response.output_text.delta", "response.reasoning_text.delta"})

# Content-part events also name their response (whoever numbers the events adds it): OGX's
# clients and conformance suite read `response_id` there. OpenAI's events do not carry it; other
# clients ignore the extra field.
PART_EVENTS = frozenset({"response.content_part.added", "response.content_part.done"})


@dataclass(frozen=True)
class RejectedCall:
    """A custom tool call whose input does not match the tool's grammar, and why."""

    item: dict[str, Any]
    reason: str


@dataclass
class ServerCall:
    """A call of a server-side tool's function: collected, never streamed as a function_call
    (the tool loop runs it and streams the tool's own item instead)."""

    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


def _client_side(_name: str) -> bool:
    return False


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _upstream_data(method: _Method) -> _Method:
    """`method` reads what the model server sent (see `upstream_shape`)."""
    @functools.wraps(method)
    def reading(self: Any, *args: Any, **kwargs: Any) -> Any:
        with upstream_shape():
            return method(self, *args, **kwargs)

    return reading  # type: ignore[return-value]


@dataclass
class StreamTranslator:
    """Feed ChatCompletionChunk dicts with `feed`; call `finish` after the last one.

    `first_output_index` is where this model call's items start in the response's output, so
    several model calls (a server-side tool loop) can share one response. Calls of functions
    for which `is_server` is true are not output: they are collected in `server_calls`."""

    first_output_index: int = 0
    with_logprobs: bool = False
    make_id: Callable[[str], str] = new_id
    is_server: Callable[[str], bool] = _client_side
    citations: Callable[[], Citations | None] | None = None
    """Gives each output_text part what turns its source markers into annotations (None: no sources)."""
    client_tool: Callable[[str], ClientTool | None] | None = None
    """The client tool a function name stands for (custom, namespace members, apply_patch...)."""
    seal: Callable[[Mapping[str, Any]], str] | None = None
    """Seals a finished reasoning item's content into its `encrypted_content` (include asked for it)."""
    guard: bool = False
    """Hold every event from the first unchecked text on, until the output guardrail `release`s or
    `block`s them (nothing unchecked reaches a client)."""
    blocked: bool = False
    _held: list[Event] = field(default_factory=list)
    _unchecked: list[str] = field(default_factory=list)
    items: list[OutputItem] = field(default_factory=list)
    _open: OutputItem | None = None
    _calls: dict[int, OutputItem] = field(default_factory=dict)
    _server: dict[int, ServerCall] = field(default_factory=dict)
    rejected: list[RejectedCall] = field(default_factory=list)
    """Custom tool calls of this turn whose input the tool's grammar does not accept (not output)."""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    service_tier: str | None = None
    """The tier the upstream says served the call (OpenAI answers it; many servers do not)."""

    @property
    def output(self) -> list[dict[str, Any]]:
        return [item.item for item in self.items]

    @property
    def server_calls(self) -> list[ServerCall]:
        """The server-side calls of this model turn, in the model's order."""
        return [self._server[index] for index in sorted(self._server)]

    @_upstream_data
    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        if self.blocked:
            return []  # the rest of a blocked answer is read and dropped
        events = self._feed(chunk)
        return self._hold(events) if self.guard else events

    # --- the output guardrail -------------------------------------------------------------------

    @property
    def unchecked(self) -> str:
        """Text and reasoning held for the guardrail to check."""
        return "".join(self._unchecked)

    def _hold(self, events: list[Event]) -> list[Event]:
        texts = [str(event["delta"]) for event in events if event["type"] in _HELD_DELTAS]
        if not texts and not self._held:
            return events
        self._held += events
        self._unchecked += texts
        return []

    @property
    def held(self) -> int:
        return len(self._held)

    def release(self, count: int | None = None) -> list[Event]:
        """The first `count` held events (all by default): their text was checked and may go to clients."""
        count = len(self._held) if count is None else count
        events, self._held = self._held[:count], self._held[count:]
        deltas = [event for event in events if event["type"] in _HELD_DELTAS]
        self._unchecked = self._unchecked[len(deltas):]
        by_index = {item.output_index: item for item in self.items}
        for event in deltas:
            item = by_index.get(event["output_index"])
            if item is not None and event["content_index"] < len(item.parts):
                item.parts[event["content_index"]].released += len(event["delta"])
        return events

    def block(self) -> list[Event]:
        """Drop the held text (the guardrail flagged it): every part keeps only what was released,
        the answer ends with `finish_reason: content_filter`. The events that open items and
        parts are still given, so the stream stays whole."""
        kept = [event for event in self._held if event["type"] in ("response.output_item.added", "response.content_part.added")]
        self._held, self._unchecked = [], []
        for item in self.items:
            for part in item.parts:
                text = "".join(part.text)[:part.released]
                part.text = [text] if text else []
                part.citations = None
            if item is not self._open and "content" in item.item:
                item.item["content"] = [part_body(part, done=True) for part in item.parts]
        self.blocked = True
        self.finish_reason = "content_filter"
        return kept

    def _feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        if chunk.get("usage"):
            self.usage = upstream_usage(chunk["usage"]) or self.usage
        if isinstance(chunk.get("service_tier"), str):
            self.service_tier = chunk["service_tier"]
        choices = chunk.get("choices") or ()
        choice = next((c for c in choices if c.get("index", 0) == 0), None)
        if choice is None:
            return []
        events: list[Event] = []
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            events += self._text("reasoning", "reasoning_text", reasoning, [])
        if delta.get("content"):
            logprobs = logprobs_of(choice) if self.with_logprobs else []
            events += self._text("message", "output_text", delta["content"], logprobs)
        if delta.get("refusal"):
            events += self._text("message", "refusal", delta["refusal"], [])
        for call in delta.get("tool_calls") or ():
            events += self._tool_call(call)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        return events

    @_upstream_data
    def feed_completion(self, completion: Mapping[str, Any]) -> list[Event]:
        """A whole (non-streamed) ChatCompletion, fed as one chunk."""
        events: list[Event] = []
        choices = completion.get("choices") or []
        if choices:
            choice = choices[0]
            message = dict(choice.get("message") or {})
            tool_calls = [{**call, "index": index} for index, call in enumerate(message.pop("tool_calls", None) or [])]
            events = self.feed({"choices": [{"index": 0, "delta": {**message, "tool_calls": tool_calls},
                                             "logprobs": choice.get("logprobs"), "finish_reason": choice.get("finish_reason")}]})
        self.usage = upstream_usage(completion.get("usage"))
        if isinstance(completion.get("service_tier"), str):
            self.service_tier = completion["service_tier"]
        return events

    @_upstream_data
    def finish(self, status: str = "completed") -> list[Event]:
        """Close every open item; `status` is "incomplete" when the model was cut off."""
        events = self._close_open(status)
        for index in sorted(self._calls):
            call = self._calls[index]
            events += close_call(call, status) if call.client is None else self._close_client_call(call, status)
        self._calls.clear()
        return events

    # --- text-like items (messages, reasoning) ----------------------------------------------

    def _text(self, item_type: str, part_kind: str, text: str, logprobs: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open.item["type"] != item_type:
            events += self._close_open("completed")
            events += self._open_item(new_text_item(item_type, self.make_id))
        assert self._open is not None
        current = self._open
        if not current.parts or current.parts[-1].kind != part_kind:
            events += close_part(current)
            citations = self.citations() if self.citations is not None and part_kind == "output_text" else None
            current.parts.append(ContentPart(part_kind, citations=citations))
            events.append(part_event("response.content_part.added", current, part_body(current.parts[-1], done=False)))
        part = current.parts[-1]
        part.logprobs.extend(logprobs)
        annotations: list[dict[str, Any]] = []
        if part.citations is not None:
            text, annotations = part.citations.feed(text)
        if text:
            part.text.append(text)
            events.append(delta_event(current, part, text, logprobs))
        if annotations:
            events += annotation_events(current, part, annotations)
        return events

    def _open_item(self, item: dict[str, Any]) -> list[Event]:
        self._open = OutputItem(self.first_output_index + len(self.items), item)
        self.items.append(self._open)
        return [{"type": "response.output_item.added", "output_index": self._open.output_index, "item": dict(item)}]

    def _close_open(self, status: str) -> list[Event]:
        current, self._open = self._open, None
        if current is None:
            return []
        events = close_part(current)
        current.item["status"] = status
        current.item["content"] = [part_body(part, done=True) for part in current.parts]
        if self.seal is not None and current.item["type"] == "reasoning":
            current.item["encrypted_content"] = self.seal(current.item)
        events.append({"type": "response.output_item.done", "output_index": current.output_index, "item": current.item})
        return events

    # --- function calls -----------------------------------------------------------------------

    def _tool_call(self, delta: Mapping[str, Any]) -> list[Event]:
        index = int(delta.get("index", 0))
        events: list[Event] = []
        function = delta.get("function") or {}
        server = self._server.get(index)
        if server is not None:
            if function.get("arguments"):
                server.arguments.append(function["arguments"])
            return events
        call = self._calls.get(index)
        if call is None:
            name = function.get("name") or ""
            call_id = delta.get("id") or self.make_id("call")
            if name and self.is_server(name):
                self._server[index] = ServerCall(call_id, name, [function["arguments"]] if function.get("arguments") else [])
                return events
            events += self._close_open("completed")
            tool = self.client_tool(name) if self.client_tool is not None and name else None
            if tool is not None and tool.kind != "function":  # its item is made once its arguments are whole
                call = OutputItem(-1, {"type": tool.kind, "call_id": call_id}, client=tool)
                if tool.grammar is None:
                    call.output_index = self.first_output_index + len(self.items)
                    self.items.append(call)
                self._calls[index] = call
                if function.get("arguments"):
                    call.arguments.append(function["arguments"])
                return events
            item = {
                "id": self.make_id("fc"), "type": "function_call", "status": "in_progress",
                "call_id": call_id, "name": tool.name if tool is not None else name, "arguments": "",
            }
            if tool is not None and tool.namespace:
                item["namespace"] = tool.namespace
            call = OutputItem(self.first_output_index + len(self.items), item)
            self.items.append(call)
            self._calls[index] = call
            events.append({"type": "response.output_item.added", "output_index": call.output_index, "item": dict(item)})
        elif function.get("name") and call.client is None and "namespace" not in call.item:
            call.item["name"] += function["name"]
        if function.get("arguments"):
            call.arguments.append(function["arguments"])
        if function.get("arguments") and call.client is None:
            events.append({"type": "response.function_call_arguments.delta", "item_id": call.item["id"],
                           "output_index": call.output_index, "delta": function["arguments"]})
        return events

    def _close_client_call(self, call: OutputItem, status: str) -> list[Event]:
        """The whole item of a client tool call, added and done at once (with its input's events)."""
        assert call.client is not None
        arguments = "".join(call.arguments)
        done_status = status if call.client.kind != "apply_patch" or status in ("in_progress", "completed") else "completed"
        call.item = call.client.output_item(str(call.item["call_id"]), arguments, self.make_id, done_status)
        if call.client.grammar is not None:
            reason = call.client.grammar.mismatch(str(call.item["input"])) if status == "completed" else None
            if reason is not None:
                self.rejected.append(RejectedCall(call.item, reason))
                return []
            call.output_index = self.first_output_index + len(self.items)
            self.items.append(call)
        added = {**call.item, "input": ""} if call.item["type"] == "custom_tool_call" else call.item
        events: list[Event] = [{"type": "response.output_item.added", "output_index": call.output_index, "item": dict(added)}]
        if call.item["type"] == "custom_tool_call":
            base = {"item_id": call.item["id"], "output_index": call.output_index}
            events += [{"type": "response.custom_tool_call_input.delta", **base, "delta": call.item["input"]},
                       {"type": "response.custom_tool_call_input.done", **base, "input": call.item["input"]}]
        elif call.item["type"] == "shell_call":
            for index, command in enumerate(call.item["action"]["commands"]):
                base = {"output_index": call.output_index, "command_index": index}
                events += [{"type": "response.shell_call_command.added", **base, "command": ""},
                           {"type": "response.shell_call_command.delta", **base, "delta": command},
                           {"type": "response.shell_call_command.done", **base, "command": command}]
        events.append({"type": "response.output_item.done", "output_index": call.output_index, "item": call.item})
        return events


def output_from_completion(
    completion: Mapping[str, Any], *, first_output_index: int = 0, with_logprobs: bool = False, make_id: Callable[[str], str] = new_id,
    is_server: Callable[[str], bool] = _client_side,
) -> StreamTranslator:
    """The output of a non-streamed ChatCompletion, built by the same state machine as a stream
    (fed the whole message as one chunk), so both paths give the same items."""
    translator = StreamTranslator(first_output_index=first_output_index, with_logprobs=with_logprobs, make_id=make_id,
                                  is_server=is_server)
    translator.feed_completion(completion)
    return translator
