"""A llama.cpp chat answer in OpenAI's terms: the whole completion (`finish_completion`) or its
chunks as they are generated (`stream_chunks`), with a tool call the model wrote as text
(tool_calls.OPEN ...) turned into OpenAI's `tool_calls`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from contract.ids import random_hex
from providers.inference.local import tool_calls

__all__ = ["StreamedChoice", "finish_completion", "stream_chunks", "tool_call"]


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """An OpenAI tool call, given a new id."""
    return {"id": f"call_{random_hex(12)}", "type": "function", "function": {"name": name, "arguments": arguments}}


def finish_completion(completion: dict[str, Any], model_id: str, with_tools: bool) -> dict[str, Any]:
    """The binding's whole completion as OpenAI's: its id and model, and each choice's tool call
    read out of its text."""
    completion["id"] = f"chatcmpl-{random_hex(16)}"
    completion["model"] = model_id
    for choice in completion.get("choices") or ():
        message = choice.get("message") or {}
        call = tool_calls.parse_call(message.get("content") or "") if with_tools else None
        if call is not None:
            choice["message"] = {"role": "assistant", "content": None, "tool_calls": [tool_call(*call)]}
            choice["finish_reason"] = "tool_calls"
        elif with_tools and tool_calls.unfinished_call(message.get("content") or ""):
            # A call cut off by the token limit is no answer: its markup is not shown as text.
            choice["message"] = {"role": "assistant", "content": None}
        elif isinstance(message.get("content"), str):
            message["content"] = tool_calls.without_markup(message["content"])  # markup never reaches a client as text
    return completion


async def stream_chunks(chunks: AsyncIterator[dict[str, Any]], model_id: str, with_tools: bool,
                        include_usage: bool) -> AsyncIterator[dict[str, Any]]:
    """OpenAI chunks: text as it comes; a tool call (which must be whole to be read) at its
    choice's end. With `n` choices, each choice's chunks follow the one before's."""
    head = {"id": f"chatcmpl-{random_hex(16)}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model_id}
    # Nothing is sent before the model's first chunk: a prompt it refuses (over its context) is
    # then the request's error, answered with a status, not a stream cut short.
    choice: StreamedChoice | None = None
    completion_tokens, prompt_tokens = 0, 0
    async for chunk in chunks:
        if "prompt_tokens" in chunk:
            prompt_tokens = chunk["prompt_tokens"]
            continue
        generated = (chunk.get("choices") or [{}])[0]
        index = generated.get("index", 0)
        if choice is None or index != choice.index:
            if choice is not None:
                for delta in choice.end():
                    yield {**head, "choices": [delta]}
                completion_tokens += choice.tokens
            choice = StreamedChoice(index, with_tools)
            yield {**head, "choices": [choice.delta({"role": "assistant", "content": ""})]}
        choice.finish = generated.get("finish_reason") or choice.finish
        text = choice.text((generated.get("delta") or {}).get("content"))
        if text:
            yield {**head, "choices": [choice.delta({"content": text})]}
    if choice is None:
        return
    for delta in choice.end():
        yield {**head, "choices": [delta]}
    completion_tokens += choice.tokens
    if include_usage:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
        yield {**head, "choices": [], "usage": usage}


class StreamedChoice:
    """One choice of a stream as it is generated: its text goes out as it comes, unless it may be
    the start of a tool call, which is held until it is whole."""

    def __init__(self, index: int, with_tools: bool) -> None:
        self.index = index
        self.holding = with_tools
        self.held: list[str] = []
        self.tokens = 0
        self.finish = "stop"
        self.markup = tool_calls.MarkupFilter()
        """What goes out as text passes it: the model's tool-call markup never reaches a client as text."""

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": self.index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def text(self, text: str | None) -> str | None:
        """What of a generated piece of text goes out now."""
        if not text:
            return None
        self.tokens += 1
        if not self.holding:
            return self.markup.feed(text) or None
        self.held.append(text)
        joined = "".join(self.held).lstrip()
        if joined and not tool_calls.OPEN.startswith(joined[: len(tool_calls.OPEN)]):
            self.holding = False  # text, not a call: what was held goes out
            text, self.held = "".join(self.held), []
            return self.markup.feed(text) or None
        return None

    def end(self) -> list[dict[str, Any]]:
        """The choice's last deltas: a held tool call or text, then the finish reason."""
        deltas = []
        held = "".join(self.held)
        call = tool_calls.parse_call(held) if held else None
        if call is not None:
            self.finish = "tool_calls"
            deltas.append(self.delta({"tool_calls": [{"index": 0, **tool_call(*call)}]}))
            text = self.markup.end()
        else:  # a call cut off by the token limit is not shown as text
            text = ("" if tool_calls.unfinished_call(held) else self.markup.feed(held)) + self.markup.end()
        if text:
            deltas.append(self.delta({"content": text}))
        deltas.append(self.delta({}, self.finish))
        return deltas
