"""Responses stream events in, Anthropic's stream events out: a streamed Messages request with
server tools (`server_tools.py`), translated as it comes, pure over a small state (as
`stream.py` translates chat chunks); the I/O loop that feeds it is the caller's.

    start()                            message_start, as for chat
    reasoning_text.delta               a `thinking` block's thinking_delta; its signature_delta when the item is done
    output_text.delta                  a `text` block's text_delta
    output_text.annotation.added       a url_citation: the span it covers in a block of its own, opened with a
                                       citations_delta per citation before its text_delta, as Anthropic streams
                                       cited text. So that the span is not already sent, text is held from the
                                       start of its sentence (where a citation placed later can begin, as
                                       `contract.tool_runtime.citations.sentence_start` says) until the next delta
                                       shows it uncited, when the request has the web search tool; without it,
                                       text goes on at once. A citation of text already sent (an answer citing
                                       nothing cites its sources over the whole of it) goes on the open block
    refusal.delta                      a `text` block's text_delta (stop_reason refusal)
    function_call                      a `tool_use` block opened when the item is added, its arguments as
                                       input_json_delta, closed when it is done
    mcp_call, web_search_call done     the server tool's blocks (`from_response.item_blocks`), each opened and closed
                                       at once, a use's input in one input_json_delta, as Anthropic sends them
    response.completed / incomplete    message_delta (stop_reason, usage), message_stop
    response.failed, error             Anthropic's `error` event, as its stream ends when it breaks

The events fold (the SDK's accumulator) into the Message `from_response.message_from_response`
gives the same response whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.tool_runtime.citations import sentence_start
from providers.messages.from_response import ResultSeal, citation, item_blocks, item_pages, stop_reason, usage
from providers.messages.response import new_message_id, tool_use_id
from providers.messages.stream import Blocks, Event, delta, message_end, message_start

__all__ = ["ResponseStream", "error_event"]

_ERROR_TYPES = {"rate_limit_exceeded": "rate_limit_error", "invalid_prompt": "invalid_request_error",
                "context_length_exceeded": "invalid_request_error", "service_unavailable": "overloaded_error"}


_SHOWN_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens", "output_tokens_details",
                "server_tool_use")
"""The usage a stream's message_delta carries."""


def error_event(code: Any, message: Any) -> Event:
    """Anthropic's `error` event for a Responses error code and message."""
    kind = _ERROR_TYPES.get(str(code), "api_error")
    return "error", {"type": "error", "error": {"type": kind, "message": str(message or "The response failed.")}}


@dataclass
class _Part:
    """An output_text part as its deltas came: what was received, how much of it is sent."""

    text: str = ""
    sent: int = 0


class ResponseStream:
    """See the module's docstring."""

    def __init__(self, model: str, *, web_search: bool, sign: Callable[[str], str] | None = None, seal_result: ResultSeal) -> None:
        self.id = new_message_id()
        self.model = model
        self.web_search = web_search
        self.seal_result = seal_result
        self._blocks = Blocks(sign)
        self._calls: dict[str, int] = {}
        """A function_call item's id: its tool_use block's index."""
        self._part = _Part()
        self._pages: dict[str, str] = {}
        self._searches = 0
        self._tool_use = self._refused = self.ended = False
        self.failure: tuple[str, str] | None = None
        """The code and message of the failure that ended the response, if one did."""

    def start(self) -> list[Event]:
        return [message_start(self.id, self.model, 0)]

    def feed(self, event: Mapping[str, Any]) -> list[Event]:
        """The events of one Responses stream event."""
        kind = event.get("type")
        if kind == "response.output_text.delta":
            return self._text(str(event.get("delta") or ""))
        if kind == "response.output_text.annotation.added":
            return self._citation(event.get("annotation") or {})
        if kind == "response.reasoning_text.delta":
            return self._blocks.append("thinking", str(event.get("delta") or ""))
        if kind == "response.refusal.delta":
            self._refused = True
            return self._blocks.append("text", str(event.get("delta") or ""))
        if kind == "response.function_call_arguments.delta":
            return self._arguments(str(event.get("item_id")), str(event.get("delta") or ""))
        if kind == "response.output_text.done":
            return self._flush(len(self._part.text))
        if kind == "response.output_item.added":
            return self._added(event.get("item") or {})
        if kind == "response.output_item.done":
            return self._done(event.get("item") or {})
        if kind in ("response.completed", "response.incomplete"):
            return self._end(event.get("response") or {})
        if kind in ("response.failed", "error"):
            self.ended = True
            failure = (event.get("response") or {}).get("error") or {} if kind == "response.failed" else event
            self.failure = (str(failure.get("code")), str(failure.get("message") or "The response failed."))
            return [error_event(*self.failure)]
        return []

    # --- text and its citations ----------------------------------------------------------------

    def _text(self, piece: str) -> list[Event]:
        if not self.web_search:
            return self._blocks.append("text", piece)
        # What came before this piece and no citation took is sent up to where a citation could
        # still begin (the annotations of a piece's text follow it at once). Read from what is
        # unsent: a sentence, not the whole answer, per piece.
        part = self._part
        events = self._flush(part.sent + sentence_start(part.text[part.sent:]))
        part.text += piece
        return events

    def _flush(self, end: int) -> list[Event]:
        part = self._part
        if end <= part.sent:
            return []
        text, part.sent = part.text[part.sent:end], end
        return self._blocks.append("text", text)

    def _citation(self, annotation: Mapping[str, Any]) -> list[Event]:
        if annotation.get("type") != "url_citation" or not self.web_search:  # only web search cites (its text is kept for it)
            return []
        part = self._part
        start, end = int(annotation.get("start_index") or 0), min(int(annotation.get("end_index") or 0), len(part.text))
        cited = citation(annotation, part.text, self._pages)
        block = self._blocks.open
        if block is not None and block.span == (start, end):  # another source of the same span
            return [delta(block.index, {"type": "citations_delta", "citation": cited})]
        if start < part.sent:  # over text already sent: on the block that holds its end
            events = self._flush(end)
            target = self._blocks.open.index if self._blocks.open is not None else self._blocks.next - 1
            return [*events, delta(target, {"type": "citations_delta", "citation": cited})] if target >= 0 else events
        events = self._flush(start)
        block, opened = self._blocks.start("text", {"type": "text", "text": ""})
        block.span = (start, end)
        events += [*opened, delta(block.index, {"type": "citations_delta", "citation": cited})]
        if end > start:
            block.texts.append(part.text[start:end])
            events.append(delta(block.index, {"type": "text_delta", "text": part.text[start:end]}))
        part.sent = max(part.sent, end)
        return events

    # --- items ------------------------------------------------------------------------------

    def _added(self, item: Mapping[str, Any]) -> list[Event]:
        if item.get("type") == "message":
            self._part = _Part()
        if item.get("type") != "function_call":
            return []
        self._tool_use = True
        block, events = self._blocks.start("tool_use", {"type": "tool_use", "id": tool_use_id(item.get("call_id")),
                                                 "name": str(item.get("name") or ""), "input": {}})
        self._calls[str(item.get("id"))] = block.index
        return events

    def _arguments(self, item_id: str, arguments: str) -> list[Event]:
        index = self._calls.get(item_id)
        if index is None or not arguments:
            return []
        return [delta(index, {"type": "input_json_delta", "partial_json": arguments})]

    def _done(self, item: Mapping[str, Any]) -> list[Event]:
        kind = item.get("type")
        if kind == "message":
            return [*self._flush(len(self._part.text)), *self._blocks.close()]
        if kind in ("reasoning", "function_call"):
            mine = self._blocks.open is not None and (self._blocks.open.kind == "thinking" if kind == "reasoning"
                                                else self._blocks.open.index == self._calls.get(str(item.get("id"))))
            return self._blocks.close() if mine else []
        self._pages.update(item_pages(item))
        blocks = item_blocks(item, self.seal_result)
        if not blocks:
            return []
        self._searches += kind == "web_search_call"
        events = self._blocks.close()
        for block in blocks:
            events += self._whole(block)
        return events

    def _whole(self, block: dict[str, Any]) -> list[Event]:
        """A server tool's block, opened and closed at once (a use's input in one delta)."""
        has_input = "input" in block
        opened, events = self._blocks.start(block["type"], {**block, "input": {}} if has_input else block)
        if has_input:
            events.append(delta(opened.index, {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}))
        return [*events, *self._blocks.close()]

    def _end(self, response: Mapping[str, Any]) -> list[Event]:
        self.ended = True
        events = [*self._flush(len(self._part.text)), *self._blocks.close()]
        reason = stop_reason(response.get("status"), response.get("incomplete_details"), tool_use=self._tool_use, refused=self._refused)
        counts = usage(response.get("usage"), self._searches if self.web_search else None)
        shown: dict[str, Any] = {key: counts[key] for key in _SHOWN_USAGE if key in counts}
        return [*events, *message_end(reason, None, shown)]
