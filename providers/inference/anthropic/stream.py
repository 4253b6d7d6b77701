"""Anthropic's stream events as ChatCompletionChunk payloads: pure translation over a small state
object (fed one event at a time), the I/O loop kept in the provider.

    message_start                       the role chunk
    content_block_start  tool_use       a tool call delta with its id and name (index: its place among the calls)
                         redacted_thinking  a `thinking_blocks` delta holding it
    content_block_delta  text_delta     content
                         thinking_delta reasoning_content
                         input_json_delta  the call's arguments (the schema tool's: content)
    content_block_stop   thinking       a `thinking_blocks` delta with the whole block and its signature
    message_delta                       the finish reason
    message_stop                        the usage chunk (`choices: []`), when the request asked for it
    error                               raised, as the error it stands for
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from contract.errors import UpstreamError
from providers.inference.anthropic.errors import from_envelope
from providers.inference.anthropic.response import chat_usage, finish_reason

__all__ = ["StreamTranslator"]

Chunk = dict[str, Any]


@dataclass
class _Block:
    kind: str
    call: int | None = None
    """The tool call's index among the answer's calls (None: not a call)."""
    parts: list[str] = field(default_factory=list)
    signature: str = ""
    arguments: bool = False


@dataclass
class StreamTranslator:
    provider_id: str
    schema_tool: str | None = None
    include_usage: bool = False
    id: str = ""
    model: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    usage: dict[str, Any] = field(default_factory=dict)
    finish: str | None = None
    finished: bool = False
    calls: list[str] = field(default_factory=list)
    """The ids of the answer's tool calls, in order."""
    thinking: list[dict[str, str]] = field(default_factory=list)
    """The answer's thinking blocks, whole (for the provider's memory)."""
    reasoning: list[str] = field(default_factory=list)
    _blocks: dict[int, _Block] = field(default_factory=dict)

    def feed(self, event: dict[str, Any]) -> list[Chunk]:
        handler = _HANDLERS.get(str(event.get("type")))
        return handler(self, event) if handler is not None else []  # ping, and events of later API versions

    def _message_start(self, event: dict[str, Any]) -> list[Chunk]:
        message = event.get("message") or {}
        self.id, self.model = str(message.get("id") or ""), str(message.get("model") or "")
        self.usage.update(message.get("usage") or {})
        return [self._chunk({"role": "assistant", "content": ""})]

    def _content_block_start(self, event: dict[str, Any]) -> list[Chunk]:
        block = event.get("content_block") or {}
        kind = str(block.get("type"))
        if kind == "tool_use" and block.get("name") == self.schema_tool:
            kind = "schema"
        state = self._blocks[int(event.get("index", 0))] = _Block(kind)
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        if kind == "redacted_thinking":
            whole = {"type": "redacted_thinking", "data": str(block.get("data") or "")}
            self.thinking.append(whole)
            return [self._chunk({"thinking_blocks": [whole]})]
        if kind == "tool_use":
            state.call = len(self.calls)
            self.calls.append(str(block.get("id") or ""))
            return [self._chunk({"tool_calls": [{"index": state.call, "id": self.calls[-1], "type": "function",
                                                 "function": {"name": str(block.get("name") or ""), "arguments": ""}}]})]
        return []

    def _content_block_delta(self, event: dict[str, Any]) -> list[Chunk]:
        state = self._blocks.get(int(event.get("index", 0)))
        delta = event.get("delta") or {}
        kind = delta.get("type")
        if state is None:
            return []
        if kind == "text_delta" and delta.get("text"):
            return [self._chunk({"content": delta["text"]})]
        if kind == "thinking_delta" and delta.get("thinking"):
            state.parts.append(delta["thinking"])
            self.reasoning.append(delta["thinking"])
            return [self._chunk({"reasoning_content": delta["thinking"]})]
        if kind == "signature_delta":
            state.signature += str(delta.get("signature") or "")
        elif kind == "input_json_delta" and delta.get("partial_json"):
            state.arguments = True
            if state.kind == "schema":
                return [self._chunk({"content": delta["partial_json"]})]
            return [self._chunk({"tool_calls": [{"index": state.call, "function": {"arguments": delta["partial_json"]}}]})]
        return []

    def _content_block_stop(self, event: dict[str, Any]) -> list[Chunk]:
        state = self._blocks.get(int(event.get("index", 0)))
        if state is None:
            return []
        if state.kind == "thinking":
            whole = {"type": "thinking", "thinking": "".join(state.parts), "signature": state.signature}
            self.thinking.append(whole)
            return [self._chunk({"thinking_blocks": [whole]})]
        if not state.arguments and state.kind in ("tool_use", "schema"):  # a call without arguments: an empty object
            if state.kind == "schema":
                return [self._chunk({"content": "{}"})]
            return [self._chunk({"tool_calls": [{"index": state.call, "function": {"arguments": "{}"}}]})]
        return []

    def _message_delta(self, event: dict[str, Any]) -> list[Chunk]:
        self.usage.update({key: value for key, value in (event.get("usage") or {}).items() if value is not None})
        stop_reason = (event.get("delta") or {}).get("stop_reason")
        if stop_reason is None:
            return []
        self.finish = finish_reason(stop_reason, bool(self.calls))
        return [self._chunk({}, self.finish)]

    def _message_stop(self, event: dict[str, Any]) -> list[Chunk]:
        self.finished = True
        if not self.include_usage:
            return []
        return [{"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [], "usage": chat_usage(self.usage)}]

    def _error(self, event: dict[str, Any]) -> list[Chunk]:
        raise from_envelope(self.provider_id, event)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> Chunk:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def ended(self) -> None:
        """Raise unless the stream reached `message_stop` (a stream cut short is no answer)."""
        if not self.finished:
            raise UpstreamError(f"inference provider '{self.provider_id}': its stream ended before the answer did (no message_stop)",
                                code="upstream_stream_error")


_HANDLERS: dict[str, Callable[[StreamTranslator, dict[str, Any]], list[Chunk]]] = {
    "message_start": StreamTranslator._message_start,
    "content_block_start": StreamTranslator._content_block_start,
    "content_block_delta": StreamTranslator._content_block_delta,
    "content_block_stop": StreamTranslator._content_block_stop,
    "message_delta": StreamTranslator._message_delta,
    "message_stop": StreamTranslator._message_stop,
    "error": StreamTranslator._error,
}
