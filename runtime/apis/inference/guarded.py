"""The output guardrail of chat (and legacy) completions: what a model answers is checked by the stack's safety
provider before any client sees it, and before a `store: true` completion is stored.

A whole completion is checked at once, each choice on its own. A stream is held from its first
unchecked text on and checked in batches of about `OUTPUT_BATCH_CHARS` characters: a batch is
checked while the answer goes on streaming into the hold, and its chunks are released once its
check is back, so the client waits for one check at a time, not one per token. A flagged choice
ends at once with `finish_reason: content_filter`: its held text is dropped and the rest of it is
not read (the upstream stream is closed once every choice has ended)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from runtime.apis.safety.guard import flagged_outputs
from contract.safety.protocol import SafetyProvider

__all__ = ["OUTPUT_BATCH_CHARS", "guard_completion", "guard_stream", "guard_text_completion"]

OUTPUT_BATCH_CHARS = 400  # text held before it is checked: a few sentences, not every token
_TEXT_FIELDS = ("content", "reasoning_content", "reasoning")  # what a client reads: the answer and its reasoning
_CHUNK_FIELDS = ("id", "object", "created", "model", "system_fingerprint")


def _text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    return "".join(value for key in _TEXT_FIELDS if isinstance(value := part.get(key), str))


async def guard_completion(safety: SafetyProvider, completion: dict[str, Any]) -> None:
    """Check every choice of a ChatCompletion; a flagged one keeps no text (content_filter)."""
    choices = [(choice, text) for choice in completion.get("choices") or ()
               if (text := _text(choice.get("message") if isinstance(choice, dict) else None)).strip()]
    if not choices:
        return
    for (choice, _), flagged in zip(choices, await flagged_outputs(safety, [text for _, text in choices]), strict=True):
        if flagged:
            choice.update(message={"role": "assistant", "content": None, "refusal": None}, finish_reason="content_filter",
                          logprobs=None)


async def guard_text_completion(safety: SafetyProvider, completion: dict[str, Any]) -> None:
    """Check every choice of a legacy Completion; a flagged one keeps no text (content_filter)."""
    choices = [choice for choice in completion.get("choices") or () if isinstance(choice, dict) and _choice_text(choice, True).strip()]
    if not choices:
        return
    for choice, flagged in zip(choices, await flagged_outputs(safety, [choice["text"] for choice in choices]), strict=True):
        if flagged:
            choice.update(text="", finish_reason="content_filter", logprobs=None)


def _choice_text(choice: dict[str, Any], text_completion: bool) -> str:
    """The text a chunk's or answer's choice adds: a legacy completion's `text`, a chat chunk's delta."""
    if text_completion:
        text = choice.get("text")
        return text if isinstance(text, str) else ""
    return _text(choice.get("delta"))


class _Hold:
    """Chunks held since the first unchecked text, and the text of each choice not yet checked."""

    def __init__(self, choices: int, text_completion: bool = False) -> None:
        self.choices = choices
        self.text_completion = text_completion
        self.held: list[dict[str, Any]] = []
        self.unchecked: dict[int, list[str]] = {}
        self.ended: set[int] = set()
        self.last: dict[str, Any] = {}

    @property
    def unchecked_chars(self) -> int:
        return sum(len(part) for parts in self.unchecked.values() for part in parts)

    @property
    def done(self) -> bool:
        """Every choice ended by the guardrail: nothing more of the answer can reach the client."""
        return len(self.ended) >= self.choices

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks that may go out now (none while anything is held: order is kept)."""
        self.last = chunk
        choices = chunk.get("choices")
        if self.ended and isinstance(choices, list) and choices:
            kept = [choice for choice in choices if not (isinstance(choice, dict) and choice.get("index", 0) in self.ended)]
            if not kept:
                return []
            chunk["choices"] = kept
        texts = [(int(choice.get("index", 0)), text) for choice in chunk.get("choices") or ()
                 if isinstance(choice, dict) and (text := _choice_text(choice, self.text_completion))]
        if not texts and not self.held:
            return [chunk]
        self.held.append(chunk)
        for index, text in texts:
            self.unchecked.setdefault(index, []).append(text)
        return []

    def check(self, safety: SafetyProvider) -> tuple[asyncio.Future[list[bool]], list[int], int] | None:
        """Start checking all unchecked text: (the check, the choices it covers, the chunks it covers)."""
        batch = {index: "".join(parts) for index, parts in self.unchecked.items()}
        self.unchecked = {}
        indexes = [index for index, text in batch.items() if text.strip()]
        if not indexes:
            return None
        return asyncio.ensure_future(flagged_outputs(safety, [batch[index] for index in indexes])), indexes, len(self.held)

    def settle(self, pending: tuple[asyncio.Future[list[bool]], list[int], int]) -> list[dict[str, Any]]:
        """The chunks a finished check lets out: flagged choices ended, the rest released."""
        check, indexes, count = pending
        flags = check.result()  # a check that failed closed raises here: the stream ends with its error
        out = [self._end(index) for index, flagged in zip(indexes, flags, strict=True) if flagged]
        return out + self.release(count)

    def release(self, count: int | None = None) -> list[dict[str, Any]]:
        count = len(self.held) if count is None else count
        released, self.held = self.held[:count], self.held[count:]
        return released

    def _end(self, index: int) -> dict[str, Any]:
        """End choice `index` as filtered: its held text dropped, its later chunks never sent."""
        self.ended.add(index)
        self.unchecked.pop(index, None)
        kept = []
        for chunk in self.held:
            choices = chunk.get("choices")
            if isinstance(choices, list) and choices:
                chunk["choices"] = [choice for choice in choices if not (isinstance(choice, dict) and choice.get("index", 0) == index)]
                if not chunk["choices"]:
                    continue
            kept.append(chunk)
        self.held = kept
        base = {key: self.last[key] for key in _CHUNK_FIELDS if key in self.last}
        if self.text_completion:
            return {**base, "choices": [{"index": index, "text": "", "logprobs": None, "finish_reason": "content_filter"}]}
        return {**base, "choices": [{"index": index, "delta": {}, "logprobs": None, "finish_reason": "content_filter"}]}


async def guard_stream(safety: SafetyProvider, chunks: AsyncIterator[dict[str, Any]], choices: int = 1, *,
                       text_completion: bool = False) -> AsyncIterator[dict[str, Any]]:
    """The chunks of a ChatCompletionChunk stream (or, with `text_completion`, of a legacy
    Completion stream) that pass the output guardrail, in order."""
    hold = _Hold(choices, text_completion)
    pending: tuple[asyncio.Future[list[bool]], list[int], int] | None = None
    try:
        async for chunk in chunks:
            for out in hold.feed(chunk):
                yield out
            if pending is not None and pending[0].done():
                for out in hold.settle(pending):
                    yield out
                pending = None
                if hold.done:
                    return  # the rest of a flagged answer is not read
            if pending is None and hold.unchecked_chars >= OUTPUT_BATCH_CHARS:
                pending = hold.check(safety)
        # The answer has ended: the batch under way, then whatever is still unchecked.
        pending = pending or hold.check(safety)
        while pending is not None:
            await asyncio.wait([pending[0]])
            for out in hold.settle(pending):
                yield out
            pending = hold.check(safety)
        for out in hold.release():
            yield out
    finally:
        if pending is not None:
            pending[0].cancel()
        close = getattr(chunks, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
