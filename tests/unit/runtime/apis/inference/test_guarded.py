"""The output guardrail of chat completions, as a specification: what reaches the client of a
stream and of a whole completion when a check flags a choice, passes it, or cannot be made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from runtime.apis.inference.guarded import OUTPUT_BATCH_CHARS, guard_completion, guard_stream
from contract.safety.protocol import Guardrails, moderation_result
from contract.errors import UpstreamError


class FlagWord:
    """A safety provider that flags any text holding the word FLAG (or fails on FAIL)."""

    def __init__(self, fail_closed: bool = True) -> None:
        self.guardrails = Guardrails(output=True, fail_closed=fail_closed)
        self.checked: list[list[str]] = []

    async def moderate(self, inputs: Sequence[str | Mapping[str, Any]], model: str | None = None) -> dict[str, Any]:
        texts = [str(text) for text in inputs]
        self.checked.append(texts)
        await asyncio.sleep(0)
        if any("FAIL" in text for text in texts):
            raise UpstreamError("the guard is down", status_code=502)
        return {"id": "modr-1", "model": "m", "results": [moderation_result(["hate"] if "FLAG" in text else []) for text in texts]}


def chunk(index: int, content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


class Upstream:
    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks, self.read, self.closed = chunks, 0, False

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        try:
            for item in self.chunks:
                await asyncio.sleep(0)  # a network read: the guard's check runs meanwhile
                self.read += 1
                yield item
        finally:
            self.closed = True


async def passed(safety: FlagWord, upstream: Upstream, choices: int = 1) -> list[dict[str, Any]]:
    return [item async for item in guard_stream(safety, upstream.stream(), choices)]


def texts(chunks: list[dict[str, Any]], index: int = 0) -> str:
    return "".join(choice["delta"].get("content") or "" for item in chunks for choice in item["choices"] if choice["index"] == index)


WORDS = [f"word{n:03d} " for n in range(200)]  # 1,600 characters: four batches


async def test_a_clean_stream_is_passed_whole_and_checked_in_batches_not_per_chunk() -> None:
    safety = FlagWord()
    upstream = Upstream([chunk(0, "")] + [chunk(0, word) for word in WORDS] + [chunk(0, finish="stop")])
    out = await passed(safety, upstream)
    assert texts(out) == "".join(WORDS) and out[-1]["choices"][0]["finish_reason"] == "stop" and len(out) == len(upstream.chunks)
    assert 2 <= len(safety.checked) <= len(WORDS) * 8 // OUTPUT_BATCH_CHARS + 1
    assert "".join(batch[0] for batch in safety.checked) == "".join(WORDS)


async def test_a_flagged_batch_is_never_sent_and_ends_the_choice_as_content_filter() -> None:
    safety = FlagWord()
    words = WORDS[:60] + ["FLAG "] + WORDS[60:]
    upstream = Upstream([chunk(0, word) for word in words] + [chunk(0, finish="stop")])
    out = await passed(safety, upstream)
    sent = texts(out)
    assert "FLAG" not in sent and "".join(words).startswith(sent)
    assert out[-1]["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "content_filter"}]
    assert upstream.closed and upstream.read < len(upstream.chunks)  # the rest of a flagged answer is not read


async def test_with_several_choices_only_the_flagged_one_is_ended() -> None:
    safety = FlagWord()
    interleaved = [item for n in range(80) for item in (chunk(0, WORDS[n]), chunk(1, "FLAG " if n == 3 else WORDS[n]))]
    upstream = Upstream(interleaved + [chunk(0, finish="stop"), chunk(1, finish="stop")])
    out = await passed(safety, upstream, choices=2)
    assert texts(out, 0) == "".join(WORDS[:80]) and "FLAG" not in texts(out, 1)
    finishes = [(choice["index"], choice["finish_reason"]) for item in out for choice in item["choices"] if choice["finish_reason"]]
    assert finishes == [(1, "content_filter"), (0, "stop")]


async def test_a_check_that_fails_closed_raises_and_one_that_fails_open_passes() -> None:
    upstream = [chunk(0, "FAIL "), chunk(0, "more"), chunk(0, finish="stop")]
    with pytest.raises(UpstreamError) as failed:
        await passed(FlagWord(), Upstream(upstream))
    assert failed.value.status == 503 and failed.value.code == "guardrail_unavailable"
    assert texts(await passed(FlagWord(fail_closed=False), Upstream(upstream))) == "FAIL more"


async def test_a_whole_completion_keeps_no_text_of_a_flagged_choice() -> None:
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "calm"}, "finish_reason": "stop"},
                              {"index": 1, "message": {"role": "assistant", "content": "FLAG",
                                                       "reasoning_content": "why"}, "finish_reason": "stop"},
                              {"index": 2, "message": {"role": "assistant", "content": None, "tool_calls": []}, "finish_reason": "tool_calls"}]}
    safety = FlagWord()
    await guard_completion(safety, completion)
    assert safety.checked == [["calm", "FLAGwhy"]]  # a choice without text is not sent to the guard
    calm, flagged, tools = completion["choices"]
    assert calm["message"]["content"] == "calm" and tools["finish_reason"] == "tool_calls"
    assert flagged["message"] == {"role": "assistant", "content": None, "refusal": None} and flagged["finish_reason"] == "content_filter"
