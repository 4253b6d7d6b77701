"""Fold a stream of ChatCompletionChunk dicts into the ChatCompletion it amounts to; read what a
model server sent without a server error when it is JSON of the wrong shape."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from contract.errors import UpstreamError

__all__ = ["ChunkAccumulator", "upstream_shape"]

log = logging.getLogger("stack")


@contextlib.contextmanager
def upstream_shape(provider_id: str | None = None) -> Iterator[None]:
    """Around code that reads a model server's answer or chunks: what reading JSON of the wrong
    shape raises (a number for text, `null` for a choice) is the upstream's 502
    `upstream_malformed`, never a server error. The cause is logged, in case the fault is the reading's."""
    try:
        yield
    except (TypeError, AttributeError, ValueError, KeyError, IndexError) as error:
        log.warning("a model server's answer could not be read as a chat completion: %s: %s", type(error).__name__, error, exc_info=True)
        who = f" ({provider_id})" if provider_id else ""
        raise UpstreamError(f"The model server{who} sent data that is not of a chat completion's or a chat completion chunk's shape "
                            f"({type(error).__name__}: {str(error)[:120]}).", status_code=502, code="upstream_malformed") from None


@dataclass
class _Choice:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    role: str = "assistant"
    finish_reason: str | None = None
    logprobs: dict[str, list[Any]] | None = None


@dataclass
class ChunkAccumulator:
    """Feed chunks in order with `add`; `completion()` gives the whole ChatCompletion."""

    id: str = ""
    created: int = 0
    model: str = ""
    system_fingerprint: str | None = None
    service_tier: str | None = None
    usage: dict[str, Any] | None = None
    choices: dict[int, _Choice] = field(default_factory=dict)

    def add(self, chunk: dict[str, Any]) -> None:
        self.id = self.id or chunk.get("id", "")
        self.created = self.created or int(chunk.get("created") or 0)
        self.model = self.model or chunk.get("model", "")
        self.system_fingerprint = chunk.get("system_fingerprint") or self.system_fingerprint
        self.service_tier = chunk.get("service_tier") or self.service_tier
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            self._add_choice(choice)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        state = self.choices.setdefault(int(choice.get("index", 0)), _Choice())
        delta = choice.get("delta") or {}
        state.role = delta.get("role") or state.role
        for key, parts in (("content", state.content), ("reasoning_content", state.reasoning), ("refusal", state.refusal)):
            if delta.get(key):
                parts.append(delta[key])
        for call in delta.get("tool_calls") or ():
            _merge_tool_call(state.tool_calls, call)
        if choice.get("finish_reason"):
            state.finish_reason = choice["finish_reason"]
        if choice.get("logprobs"):
            state.logprobs = state.logprobs or {"content": [], "refusal": []}
            for key in ("content", "refusal"):
                state.logprobs[key].extend(choice["logprobs"].get(key) or ())

    def completion(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [_finished(index, state) for index, state in sorted(self.choices.items())],
            "usage": self.usage,
            "system_fingerprint": self.system_fingerprint,
            "service_tier": self.service_tier,
        }


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    index = int(delta.get("index", len(calls)))
    call = calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    call["id"] = delta.get("id") or call["id"]
    call["type"] = delta.get("type") or call["type"]
    function = delta.get("function") or {}
    call["function"]["name"] += function.get("name") or ""
    call["function"]["arguments"] += function.get("arguments") or ""


def _finished(index: int, state: _Choice) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": state.role,
        "content": "".join(state.content) if state.content or not (state.tool_calls or state.refusal) else None,
        "refusal": "".join(state.refusal) or None,
    }
    if state.tool_calls:
        message["tool_calls"] = [call for _, call in sorted(state.tool_calls.items())]
    if state.reasoning:
        message["reasoning_content"] = "".join(state.reasoning)
    return {"index": index, "message": message, "finish_reason": state.finish_reason, "logprobs": state.logprobs}
