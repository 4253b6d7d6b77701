"""Responses items turned into Chat Completions messages."""

from __future__ import annotations

import copy

from providers.responses.items import ChatContext, chat_messages
from runtime.apis.items import normalize_input


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


def test_a_context_continued_item_by_item_equals_the_whole_conversion_and_is_never_changed() -> None:
    items = normalize_input([
        {"role": "user", "content": "weather?"},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "call it"}]},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "sun"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}, {"type": "refusal", "refusal": "no"}]},
    ])
    for cut in range(len(items) + 1):
        head = ChatContext().extend(items[:cut])
        before = copy.deepcopy(head)
        assert head.extend(items[cut:]).messages_with("sys") == chat_messages(items, "sys")
        # A call merged into the head's last assistant message went into a copy of it.
        assert head == before
