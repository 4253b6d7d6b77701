from typing import Any

from runtime.apis.inference.chunks import ChunkAccumulator


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0, **extra: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "created": 7, "model": "m", "choices": [{"index": index, "delta": delta, "finish_reason": finish}], **extra}


def fold(*chunks: dict[str, Any]) -> dict[str, Any]:
    accumulator = ChunkAccumulator()
    for item in chunks:
        accumulator.add(item)
    return accumulator.completion()


def test_text_deltas_fold_into_one_message_with_usage() -> None:
    completion = fold(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
        {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
    )
    assert completion["id"] == "chatcmpl-1" and completion["object"] == "chat.completion" and completion["created"] == 7
    assert completion["choices"] == [{
        "index": 0, "finish_reason": "stop", "logprobs": None,
        "message": {"role": "assistant", "content": "Hello", "refusal": None},
    }]
    assert completion["usage"]["total_tokens"] == 3


def test_tool_call_deltas_merge_by_index() -> None:
    completion = fold(
        chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
    )
    message = completion["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "get", "arguments": '{"city":"Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}},
    ]


def test_reasoning_refusal_and_several_choices_are_kept_apart() -> None:
    completion = fold(
        chunk({"reasoning_content": "think"}, index=0),
        chunk({"content": "a"}, "stop", index=0),
        chunk({"refusal": "no"}, "stop", index=1),
    )
    first, second = completion["choices"]
    assert first["message"]["reasoning_content"] == "think" and first["message"]["content"] == "a"
    assert second["message"]["refusal"] == "no" and second["message"]["content"] is None
