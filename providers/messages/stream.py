"""Chat completion chunks in, Anthropic's stream events out: the translation of a streamed
answer, pure over a small state (as vLLM's entrypoints translate streams); the I/O loop that feeds
it is the caller's.

    start()   message_start: the message with no content yet, usage with the input tokens known
              (the constructor's) and output_tokens 1, as Anthropic's first event counts them
    feed()    per chunk: content blocks, indexed from 0 in the order they open, each opened by a
              content_block_start and closed by a content_block_stop when the next one opens:
              thinking (thinking_delta; a signature_delta before its stop when `sign` is given),
              text (text_delta; empty deltas are skipped), tool_use (opened with `input: {}` once
              the call's name is known, then input_json_delta as the arguments arrive; parallel
              calls told apart by their chunk `index`)
    cited     with `cited` (the request's cited documents), text is held from the start of its sentence
              until a citation marker run or the end of the text decides it (`citations.CitedText`):
              a cited sentence is a block of its own, opened with a citations_delta per citation
              then its text_delta; text not cited goes out as above
    finish()  the open block's content_block_stop, message_delta (stop_reason, stop_sequence,
              usage: output_tokens, and the input and cache counts when the chunks reported
              usage), message_stop

The message's content, stop reason and usage are those `response.message_from_chat` gives the same
answer whole: the SDK's own accumulator (`anthropic.lib.streaming`) builds that Message from these
events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract import fastjson
from providers.messages.citations import CitedDocuments, CitedText, Span
from providers.messages.response import REFUSAL_DETAILS, message_usage, new_message_id, stop_reason, tool_use_id, usage_counts

__all__ = ["Event", "MessageStream", "sse_frame"]

Event = tuple[str, dict[str, Any]]
"""An SSE event: its name, and its data."""


def sse_frame(event: str, data: dict[str, Any]) -> bytes:
    """One event as Anthropic sends it: `event: NAME`, `data: {json}`, a blank line."""
    return b"event: " + event.encode() + b"\ndata: " + fastjson.dumps(data) + b"\n\n"


@dataclass
class _Block:
    kind: str
    index: int
    texts: list[str] = field(default_factory=list)


@dataclass
class _Call:
    """A tool call as its chunks have told it so far; `block` once its block is open."""

    id: Any = None
    name: str = ""
    pending: list[str] = field(default_factory=list)
    block: int | None = None


class MessageStream:
    """See the module's docstring."""

    def __init__(self, model: str, *, input_tokens: int = 0, stop_sequences: Sequence[str] = (),
                 sign: Callable[[str], str] | None = None, cited: CitedDocuments | None = None) -> None:
        self.id = new_message_id()
        self.model = model
        self.input_tokens = input_tokens
        self.stop_sequences = stop_sequences
        self.sign = sign
        self._next_index = 0
        self._open: _Block | None = None
        self._calls: dict[int, _Call] = {}
        self._finish: Any = None
        self._matched: Any = None
        self._refused = False
        self._usage: Any = None
        self._cited = CitedText(cited) if cited is not None else None

    def start(self) -> list[Event]:
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [], "stop_reason": None,
            "stop_sequence": None, "stop_details": None, "usage": message_usage(None, input_tokens=self.input_tokens, output_tokens=1)}
        return [("message_start", {"type": "message_start", "message": message})]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        """The events of one parsed ChatCompletionChunk."""
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        choice = next((c for c in chunk.get("choices") or () if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if choice is None:
            return []
        delta = choice.get("delta") or {}
        events: list[Event] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events += self._append("thinking", reasoning)
        for text in (delta.get("content"), delta.get("refusal")):
            if isinstance(text, str) and text:
                events += self._append("text", text)
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:
            self._refused = True
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                events += self._tool_call(call)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
        if choice.get("stop_reason") is not None:
            self._matched = choice["stop_reason"]
        return events

    def finish(self) -> list[Event]:
        """The last events: the open block closed, the stop reason and usage, the end."""
        events: list[Event] = []
        for call in self._calls.values():
            if call.block is None:  # a call whose name never came: still the model's, so still shown
                events += self._open_call(call)
        if self._cited is not None:
            events += self._spans(self._cited.flush())
        events += self._close()
        reason, sequence = stop_reason(self._finish, self._matched, tool_use=bool(self._calls), refused=self._refused,
                                       stop_sequences=self.stop_sequences)
        delta: dict[str, Any] = {"stop_reason": reason, "stop_sequence": sequence}
        if reason == "refusal":
            delta["stop_details"] = dict(REFUSAL_DETAILS)
        counts = usage_counts(self._usage)
        usage = counts if self._usage else {"output_tokens": counts["output_tokens"]}
        events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    # --- blocks ----------------------------------------------------------------------------

    def _start(self, kind: str, content_block: dict[str, Any], *, held: bool = True) -> tuple[_Block, list[Event]]:
        """A new block, the open one closed (and held text sent first, unless `held` is False: the held text's own blocks)."""
        events = self._close() if self._cited is None or not held else [*self._spans(self._cited.flush()), *self._close()]
        block = _Block(kind, self._next_index)
        self._next_index += 1
        self._open = block
        return block, [*events, ("content_block_start", {"type": "content_block_start", "index": block.index,
                                                         "content_block": content_block})]

    def _close(self) -> list[Event]:
        block, self._open = self._open, None
        if block is None:
            return []
        events: list[Event] = []
        if block.kind == "thinking" and self.sign is not None:
            signature = self.sign("".join(block.texts))
            events.append(_delta(block.index, {"type": "signature_delta", "signature": signature}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": block.index}))
        return events

    def _append(self, kind: str, text: str) -> list[Event]:
        if self._cited is not None and kind == "text":
            return self._spans(self._cited.feed(text))
        events: list[Event] = []
        block = self._open
        if block is None or block.kind != kind:
            opening = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else {"type": "text", "text": ""}
            block, events = self._start(kind, opening)
        block.texts.append(text)
        body = {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
        events.append(_delta(block.index, body))
        return events

    def _spans(self, spans: list[Span]) -> list[Event]:
        """The events of cut text: a cited span in a block of its own (kind `cited`), the rest as text."""
        events: list[Event] = []
        for text, citations in spans:
            block = self._open
            if not text and not (citations and block is not None and block.kind == "cited"):
                continue  # a run with no text before it and no cited block to add to: nothing to show
            if text and (citations or block is None or block.kind != "text"):
                block, opened = self._start("cited" if citations else "text", {"type": "text", "text": ""}, held=False)
                events += opened
            assert block is not None
            events += [_delta(block.index, {"type": "citations_delta", "citation": citation}) for citation in citations]
            if text:
                events.append(_delta(block.index, {"type": "text_delta", "text": text}))
        return events

    def _tool_call(self, chunk: dict[str, Any]) -> list[Event]:
        position = chunk.get("index", 0)
        call = self._calls.setdefault(position if isinstance(position, int) else 0, _Call())
        function = chunk.get("function") or {}
        if call.id is None and chunk.get("id"):
            call.id = chunk["id"]
        if not call.name and isinstance(function.get("name"), str):
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.pending.append(arguments)
        events: list[Event] = []
        if call.block is None and call.name:
            events += self._open_call(call)
        elif call.block is not None and call.pending:
            # To its own block, even one closed since: calls interleaved by a server that streams
            # them so keep all their arguments (Anthropic's blocks never interleave).
            events.append(_delta(call.block, {"type": "input_json_delta", "partial_json": "".join(call.pending)}))
            call.pending.clear()
        return events

    def _open_call(self, call: _Call) -> list[Event]:
        block, events = self._start("tool_use", {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": {}})
        call.block = block.index
        if call.pending:
            events.append(_delta(block.index, {"type": "input_json_delta", "partial_json": "".join(call.pending)}))
            call.pending.clear()
        return events


def _delta(index: int, delta: dict[str, Any]) -> Event:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
