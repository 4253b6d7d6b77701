"""Anthropic Messages as ChatCompletions: golden pairs."""

from __future__ import annotations

from typing import Any

import pytest

from providers.inference.anthropic.response import chat_completion, chat_usage


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": content,
            "stop_reason": stop_reason, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5, **usage}}


def test_text_blocks_are_the_content_and_the_usage_is_openais() -> None:
    completion = chat_completion(message([{"type": "text", "text": "Hello "}, {"type": "text", "text": "there."}]))
    assert {key: value for key, value in completion.items() if key != "created"} == {
        "id": "msg_1", "object": "chat.completion", "model": "claude-x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there.", "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 0}},
    }


def test_tool_use_thinking_and_redacted_thinking() -> None:
    completion = chat_completion(message([
        {"type": "thinking", "thinking": "Look it up.", "signature": "sig_1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ], "tool_use"))
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant", "content": None, "refusal": None,
        "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
        "reasoning_content": "Look it up.",
        "thinking_blocks": [{"type": "thinking", "thinking": "Look it up.", "signature": "sig_1"},
                            {"type": "redacted_thinking", "data": "opaque"}],
    }


def test_the_schema_tools_call_is_the_answer_in_json() -> None:
    completion = chat_completion(message([{"type": "tool_use", "id": "toolu_1", "name": "place", "input": {"city": "Paris"}}], "tool_use"),
                                 schema_tool="place")
    assert completion["choices"][0]["message"]["content"] == '{"city": "Paris"}'
    assert completion["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in completion["choices"][0]["message"]


@pytest.mark.parametrize(("stop_reason", "finish"), [("end_turn", "stop"), ("stop_sequence", "stop"), ("pause_turn", "stop"),
                                                     ("max_tokens", "length"), ("refusal", "content_filter"),
                                                     ("model_context_window_exceeded", "length")])
def test_stop_reasons(stop_reason: str, finish: str) -> None:
    assert chat_completion(message([{"type": "text", "text": "x"}], stop_reason))["choices"][0]["finish_reason"] == finish


def test_cached_tokens_count_in_the_prompt() -> None:
    assert chat_usage({"input_tokens": 3, "output_tokens": 7, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}) == {
        "prompt_tokens": 123, "completion_tokens": 7, "total_tokens": 130, "prompt_tokens_details": {"cached_tokens": 100}}
