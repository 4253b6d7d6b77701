"""A chat completion in, an Anthropic Message out: golden pairs for each rule of
`providers/messages/response.py`, every Message checked by the anthropic SDK's own type."""

from __future__ import annotations

import re
from typing import Any

import pytest
from anthropic.types import Message

from providers.messages.response import message_from_chat, tool_use_id

USAGE = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
         "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}, "output_tokens": 0,
         "service_tier": "standard", "inference_geo": "not_available"}


def completion(message: dict[str, Any], finish: str | None = "stop", usage: dict[str, Any] | None = None,
               **choice: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen",
                            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish, **choice}]}
    if usage is not None:
        body["usage"] = usage
    return body


def translated(chat: dict[str, Any], **options: Any) -> dict[str, Any]:
    message = message_from_chat(chat, "claude-sonnet", **options)
    Message.model_validate(message)  # the SDK's own type, so the shape is Anthropic's and not ours by hand
    return message


def test_a_text_answer() -> None:
    message = translated(completion({"content": "Hello!"}, usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}))
    assert re.fullmatch(r"msg_[0-9a-f]{24}", message.pop("id"))
    assert message == {
        "type": "message", "role": "assistant", "model": "claude-sonnet", "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn", "stop_sequence": None, "stop_details": None,
        "usage": {**USAGE, "input_tokens": 12, "output_tokens": 3},
    }


def test_reasoning_text_and_tool_calls_in_anthropics_order() -> None:
    message = translated(completion({
        "reasoning_content": "They want two cities.", "content": "Checking both.", "tool_calls": [
            {"id": "call_abc123", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "toolu_01XYZ", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Ro'}},
            {"id": "chatcmpl-tool-9f", "type": "function", "function": {"name": "get_time", "arguments": ""}}]}, "tool_calls"),
        sign=lambda text: f"signed({text})")
    assert message["content"] == [
        {"type": "thinking", "thinking": "They want two cities.", "signature": "signed(They want two cities.)"},
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "toolu_abc123", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_01XYZ", "name": "get_weather", "input": {}},  # arguments cut off: no input
        {"type": "tool_use", "id": "toolu_chatcmpl-tool-9f", "name": "get_time", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use"


def test_reasoning_under_its_other_name_and_no_signature_without_sign() -> None:
    message = translated(completion({"reasoning": "Hmm.", "content": ""}))
    assert message["content"] == [{"type": "thinking", "thinking": "Hmm.", "signature": ""}]  # the empty text is left out


def test_tool_use_ids_are_anthropics_alphabet_and_stable() -> None:
    assert tool_use_id("call_a.b:c") == "toolu_a_b_c"
    assert tool_use_id("toolu_keep") == "toolu_keep"
    assert tool_use_id("x") == tool_use_id("x") == "toolu_x"
    assert re.fullmatch(r"toolu_[0-9a-f]{24}", tool_use_id(None))


@pytest.mark.parametrize(("finish", "extra", "reason", "sequence"), [
    ("stop", {}, "end_turn", None),
    ("length", {}, "max_tokens", None),
    ("tool_calls", {}, "tool_use", None),
    ("content_filter", {}, "refusal", None),
    ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the stop string it matched
    ("stop", {"stop_reason": "<|im_end|>"}, "end_turn", None),  # a stop of the model's, not the request's
    ("stop", {"stop_reason": 151645}, "end_turn", None),  # a stop token id
    (None, {}, "end_turn", None),
])
def test_stop_reasons(finish: str | None, extra: dict[str, Any], reason: str, sequence: str | None) -> None:
    message = translated(completion({"content": "x"}, finish, **extra), stop_sequences=["END"])
    assert (message["stop_reason"], message["stop_sequence"]) == (reason, sequence)
    assert message["stop_details"] == ({"type": "refusal", "category": None, "explanation": None} if reason == "refusal" else None)


def test_a_call_finished_with_stop_is_still_a_tool_use() -> None:
    chat = completion({"content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    assert translated(chat)["stop_reason"] == "tool_use"


def test_a_refusal_is_text_and_stops_as_one() -> None:
    message = translated(completion({"content": None, "refusal": "I can't help with that."}))
    assert message["content"] == [{"type": "text", "text": "I can't help with that."}]
    assert message["stop_reason"] == "refusal"


def test_usage_splits_cached_and_written_tokens_from_the_input() -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 250, "total_tokens": 1250,
             "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 100},
             "completion_tokens_details": {"reasoning_tokens": 200}}
    assert translated(completion({"content": "x"}, usage=usage))["usage"] == {
        "input_tokens": 300, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 600,
        "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 0}, "output_tokens": 250,
        "output_tokens_details": {"thinking_tokens": 200}, "service_tier": "standard", "inference_geo": "not_available"}


def test_a_completion_with_no_choices_and_no_usage_is_an_empty_message() -> None:
    message = translated({"id": "c", "choices": []})
    assert (message["content"], message["stop_reason"], message["usage"]) == ([], "end_turn", USAGE)
