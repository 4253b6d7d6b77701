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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract import fastjson
from contract.errors import APIError
from providers.messages.citations import CitedDocuments, CitedText, Span
from runtime.http.anthropic import anthropic_error
from providers.messages.response import REFUSAL_DETAILS, message_usage, new_message_id, stop_reason, tool_use_id, usage_counts

__all__ = ["Block", "Blocks", "Event", "MessageStream", "delta", "error_frame", "frames", "message_end", "message_start", "sse_frame"]

Event = tuple[str, dict[str, Any]]
"""An SSE event: its name, and its data."""


def sse_frame(event: str, data: dict[str, Any]) -> bytes:
    """One event as Anthropic sends it: `event: NAME`, `data: {json}`, a blank line."""
    return b"event: " + event.encode() + b"\ndata: " + fastjson.dumps(data) + b"\n\n"


def frames(events: list[Event]) -> bytes:
    """Events as one write."""
    return b"".join(sse_frame(name, data) for name, data in events)


def error_frame(error: APIError) -> bytes:
    """Anthropic's `error` event for an error past a stream's head, as its stream ends when it breaks."""
    _, envelope = anthropic_error(error.status, error.message)
    return sse_frame("error", {"type": "error", "error": envelope["error"]})


def message_start(message_id: str, model: str, input_tokens: int) -> Event:
    """The first event: the message with no content yet, output_tokens 1 as Anthropic's counts it."""
    message: dict[str, Any] = {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
        "stop_sequence": None, "stop_details": None, "usage": message_usage(None, input_tokens=input_tokens, output_tokens=1)}
    return "message_start", {"type": "message_start", "message": message}


def message_end(reason: str, sequence: str | None, usage: Mapping[str, Any]) -> list[Event]:
    """The last events: message_delta (the stop reason, a refusal's details, the usage), message_stop."""
    ending: dict[str, Any] = {"stop_reason": reason, "stop_sequence": sequence}
    if reason == "refusal":
        ending["stop_details"] = dict(REFUSAL_DETAILS)
    return [("message_delta", {"type": "message_delta", "delta": ending, "usage": usage}), ("message_stop", {"type": "message_stop"})]


def delta(index: int, body: dict[str, Any]) -> Event:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": body}


@dataclass
class Block:
    """A content block of a stream: its kind, its index, the text it was given."""

    kind: str
    index: int
    texts: list[str] = field(default_factory=list)
    span: tuple[int, int] | None = None
    """A cited text block of a Responses part: the span of the part's text it holds (response_stream.py)."""


_OPENINGS = {"thinking": {"type": "thinking", "thinking": "", "signature": ""}, "text": {"type": "text", "text": ""}}


class Blocks:
    """A stream's content blocks (this module's and `response_stream.py`'s): one open at a time,
    indexed from 0 in the order they open, each opened by a content_block_start and closed by a
    content_block_stop, a thinking block signed first (a signature_delta) when `sign` is given."""

    def __init__(self, sign: Callable[[str], str] | None) -> None:
        self.sign = sign
        self.open: Block | None = None
        self.next = 0

    def start(self, kind: str, content_block: dict[str, Any]) -> tuple[Block, list[Event]]:
        """A new block, the open one closed first."""
        events = self.close()
        block = self.open = Block(kind, self.next)
        self.next += 1
        return block, [*events, ("content_block_start", {"type": "content_block_start", "index": block.index,
                                                         "content_block": content_block})]

    def close(self) -> list[Event]:
        block, self.open = self.open, None
        if block is None:
            return []
        events: list[Event] = []
        if block.kind == "thinking" and self.sign is not None:
            events.append(delta(block.index, {"type": "signature_delta", "signature": self.sign("".join(block.texts))}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": block.index}))
        return events

    def takes(self, kind: str) -> bool:
        """Whether the open block goes on with text of `kind` (a cited block holds its span only)."""
        return self.open is not None and self.open.kind == kind and self.open.span is None

    def append(self, kind: str, text: str) -> list[Event]:
        """Text (`kind` text) or thinking, on the open block if it takes it, else on a new one."""
        if not text:
            return []
        block = self.open
        if block is None or block.kind != kind or block.span is not None:  # (`takes`, inline: once per chunk)
            block, events = self.start(kind, dict(_OPENINGS[kind]))
        else:
            events = []
        block.texts.append(text)
        body = {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": block.index, "delta": body}))
        return events


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
        self._blocks = Blocks(sign)
        self._calls: dict[int, _Call] = {}
        self._finish: Any = None
        self._matched: Any = None
        self._refused = False
        self._usage: Any = None
        self._cited = CitedText(cited) if cited is not None else None

    def start(self) -> list[Event]:
        return [message_start(self.id, self.model, self.input_tokens)]

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
        events += self._blocks.close()
        reason, sequence = stop_reason(self._finish, self._matched, tool_use=bool(self._calls), refused=self._refused,
                                       stop_sequences=self.stop_sequences)
        counts = usage_counts(self._usage)
        return [*events, *message_end(reason, sequence, counts if self._usage else {"output_tokens": counts["output_tokens"]})]

    # --- blocks ----------------------------------------------------------------------------

    def _start(self, kind: str, content_block: dict[str, Any]) -> tuple[Block, list[Event]]:
        """A new block, the held text sent first (in blocks of its own)."""
        held = self._spans(self._cited.flush()) if self._cited is not None else []
        block, events = self._blocks.start(kind, content_block)
        return block, [*held, *events]

    def _append(self, kind: str, text: str) -> list[Event]:
        if self._cited is None:
            return self._blocks.append(kind, text)
        if kind == "text":
            return self._spans(self._cited.feed(text))
        held = [] if self._blocks.takes(kind) else self._spans(self._cited.flush())  # held text goes out before a new block
        return [*held, *self._blocks.append(kind, text)]

    def _spans(self, spans: list[Span]) -> list[Event]:
        """The events of cut text: a cited span in a block of its own (kind `cited`), the rest as text."""
        events: list[Event] = []
        for text, citations in spans:
            block = self._blocks.open
            if not text and not (citations and block is not None and block.kind == "cited"):
                continue  # a run with no text before it and no cited block to add to: nothing to show
            if text and (citations or block is None or block.kind != "text"):
                block, opened = self._blocks.start("cited" if citations else "text", {"type": "text", "text": ""})
                events += opened
            assert block is not None
            events += [delta(block.index, {"type": "citations_delta", "citation": citation}) for citation in citations]
            if text:
                events.append(delta(block.index, {"type": "text_delta", "text": text}))
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
            events.append(delta(call.block, {"type": "input_json_delta", "partial_json": "".join(call.pending)}))
            call.pending.clear()
        return events

    def _open_call(self, call: _Call) -> list[Event]:
        block, events = self._start("tool_use", {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": {}})
        call.block = block.index
        if call.pending:
            events.append(delta(block.index, {"type": "input_json_delta", "partial_json": "".join(call.pending)}))
            call.pending.clear()
        return events
