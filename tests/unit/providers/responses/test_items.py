"""Responses input items: normalised, checked, and turned into chat messages."""

from __future__ import annotations

import pytest

from providers.responses.items import chat_messages, normalize_input
from runtime.errors import InvalidRequestError


def test_a_string_is_one_user_message_with_an_id() -> None:
    [item] = normalize_input("hi")
    assert item["id"].startswith("msg_")
    assert {k: item[k] for k in ("type", "role", "content", "status")} == {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}], "status": "completed"}


def test_easy_messages_get_their_full_form() -> None:
    user, assistant = normalize_input([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert user["content"] == [{"type": "input_text", "text": "q"}]
    assert assistant["content"] == [{"type": "output_text", "text": "a", "annotations": []}]


@pytest.mark.parametrize(("raw", "param"), [
    ([{"type": "nope"}], "input[0].type"),
    ([{"role": "robot", "content": "x"}], "input[0].role"),
    ([{"role": "user", "content": [{"type": "input_video"}]}], "input[0].content[0].type"),
    ([{"role": "user", "content": 5}], "input[0].content"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
    ([{"type": "function_call_output", "call_id": "c"}], "input[0].output"),
    ([{"role": "user", "content": [{"type": "input_image"}]}], "input[0].content[0].image_url"),
    (42, "input"),
])
def test_malformed_items_name_the_offending_field(raw: object, param: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        normalize_input(raw)
    assert error.value.param == param


def test_chat_messages_merge_parallel_calls_and_keep_order() -> None:
    items = normalize_input([
        {"role": "user", "content": "weather in two cities"},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "two calls"}]},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "a", "name": "w", "arguments": '{"c":"x"}'},
        {"type": "function_call", "call_id": "b", "name": "w", "arguments": '{"c":"y"}'},
        {"type": "function_call_output", "call_id": "a", "output": "sun"},
        {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "rain"}]},
    ])
    assert chat_messages(items, "Be brief") == [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": "weather in two cities"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "two calls", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "w", "arguments": '{"c":"x"}'}},
            {"id": "b", "type": "function", "function": {"name": "w", "arguments": '{"c":"y"}'}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
    ]


def test_images_and_files_become_chat_parts() -> None:
    [item] = normalize_input([{"role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "low"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,BBB", "filename": "a.pdf"},
    ]}])
    assert chat_messages([item], None) == [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA", "detail": "low"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,BBB", "filename": "a.pdf"}},
    ]}]
