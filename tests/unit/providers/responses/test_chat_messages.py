"""Responses items turned into Chat Completions messages."""

from __future__ import annotations

import copy

from providers.responses.items import ChatContext, chat_messages
from contract.items import normalize_input


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
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,BBB", "filename": "a.pdf"},
    ]}])
    assert chat_messages([item], None) == [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
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


def test_a_function_output_sent_after_a_later_user_message_follows_its_call() -> None:
    """Chat models refuse a tool call not immediately followed by its results."""
    items = normalize_input([
        {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "sun"},
        {"role": "user", "content": "also, hurry"},
        {"type": "function_call_output", "call_id": "b", "output": "rain"},
    ])
    assert [(m["role"], m.get("tool_call_id")) for m in chat_messages(items, None)] == [
        ("assistant", None), ("tool", "a"), ("tool", "b"), ("user", None)]


def test_images_and_files_a_function_returns_follow_its_calls_results() -> None:
    items = normalize_input([
        {"type": "function_call", "call_id": "a", "name": "shot", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": [
            {"type": "input_text", "text": "the screen:"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_file", "file_data": "data:application/pdf;base64,AA",
                                                                     "filename": "w.pdf"}]},
    ])
    messages = chat_messages(items, None)
    assert messages[1:3] == [{"role": "tool", "tool_call_id": "a", "content": "the screen:"},
                             {"role": "tool", "tool_call_id": "b", "content": "(see the content that follows)"}]
    attached = {message["content"][0]["text"]: message["content"][1] for message in messages[3:]}
    assert attached == {"(Returned by shot:)": {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"}},
                        "(Returned by w:)": {"type": "file", "file": {"file_data": "data:application/pdf;base64,AA", "filename": "w.pdf"}}}
    assert all(message["role"] == "user" for message in messages[3:]) and len(messages) == 5


def test_a_function_output_naming_a_file_by_id_is_read_in() -> None:
    items = normalize_input([
        {"type": "function_call", "call_id": "a", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_image", "file_id": "file-abc"}]},
    ])
    assert ChatContext().extend(items).file_ids
