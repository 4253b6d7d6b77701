"""A Messages request in, a chat completions body out: golden pairs, one per rule of the
translation (`providers/messages/request.py`'s table)."""

from __future__ import annotations

from typing import Any

import pytest

from providers.messages.checks import check_request
from providers.messages.request import chat_body

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
WEATHER_FUNCTION = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                     "parameters": WEATHER["input_schema"]}}


def translated(stream: bool = False, reveal: Any = None, **fields: Any) -> dict[str, Any]:
    body = {"model": "claude-sonnet", "max_tokens": 2048, "messages": [{"role": "user", "content": "Hi"}], **fields}
    check_request(body)  # every golden request is one Anthropic accepts
    return chat_body(body, "vllm/qwen", stream=stream, reveal=reveal)


def messages_of(messages: list[Any], **fields: Any) -> list[dict[str, Any]]:
    chat_messages: list[dict[str, Any]] = translated(messages=messages, **fields)["messages"]
    return chat_messages


def test_the_simplest_request() -> None:
    assert translated() == {"model": "vllm/qwen", "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 2048}


def test_the_scalar_parameters() -> None:
    chat = translated(stream=True, system="Be brief.", stop_sequences=["END", "STOP"], temperature=0.2, top_p=0.9, top_k=40,
                      metadata={"user_id": "user-7"}, service_tier="standard_only", speed="fast", inference_geo="eu",
                      cache_control={"type": "ephemeral"}, context_management={"edits": []}, container="c1")
    assert chat == {
        "model": "vllm/qwen", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 2048, "stream": True, "stream_options": {"include_usage": True}, "stop": ["END", "STOP"],
        "temperature": 0.2, "top_p": 0.9, "top_k": 40, "user": "user-7",
    }


def test_system_blocks_one_is_a_string_several_are_parts_and_cache_control_is_dropped() -> None:
    block = {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    assert translated(system=[block])["messages"][0] == {"role": "system", "content": "Be brief."}
    assert translated(system=[block, {"type": "text", "text": "Use French."}])["messages"][0] == {
        "role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use French."}]}
    assert translated(system="")["messages"] == [{"role": "user", "content": "Hi"}]


def test_a_users_blocks_as_parts() -> None:
    content = [
        {"type": "text", "text": "Look:", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "image", "source": {"type": "file", "file_id": "file-img"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}, "title": "Q3.pdf"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Line one."}, "title": "Notes",
         "context": "From the meeting."},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Bare."}},
        {"type": "document", "source": {"type": "content", "content": [
            {"type": "text", "text": "Part A"}, {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}}]},
         "title": "Mixed"},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/papers/attention.pdf?v=2"}},
        {"type": "document", "source": {"type": "file", "file_id": "file-doc"}},
        {"type": "search_result", "source": "https://example.com/r", "title": "Result", "content": [
            {"type": "text", "text": "First."}, {"type": "text", "text": "Second."}]},
    ]
    assert messages_of([{"role": "user", "content": content}]) == [{"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "file", "file": {"file_id": "file-img"}},
        {"type": "text", "text": "[Document: Q3.pdf]"},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "Q3.pdf"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "document.pdf"}},
        {"type": "text", "text": "[Document: Notes]\nFrom the meeting.\nLine one."},
        {"type": "text", "text": "Bare."},
        {"type": "text", "text": "[Document: Mixed]"},
        {"type": "text", "text": "Part A"},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
        {"type": "file", "file": {"file_data": "https://example.com/papers/attention.pdf?v=2", "filename": "attention.pdf"}},
        {"type": "file", "file": {"file_id": "file-doc"}},
        {"type": "text", "text": "[Search result: Result]\nSource: https://example.com/r\nFirst.\n\nSecond."},
    ]}]


def test_an_assistants_text_thinking_and_tool_uses() -> None:
    turns = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris", "units": ["C"]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18C"}]},
    ]
    assert messages_of(turns, tools=[WEATHER])[1:] == [
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "The user wants weather.", "tool_calls": [
            {"id": "toolu_01A", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris","units":["C"]}'}}]},
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "18C"},
    ]


def test_an_assistant_with_tool_uses_only_has_no_content() -> None:
    turns = [{"role": "user", "content": "Go"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]}]
    assert messages_of(turns, tools=[WEATHER])[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}


def test_redacted_thinking_is_read_by_reveal_or_dropped() -> None:
    turns = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "First.", "signature": "s"}, {"type": "redacted_thinking", "data": "sealed-1"},
        {"type": "redacted_thinking", "data": "sealed-2"}, {"type": "text", "text": "A"}]}, {"role": "user", "content": "Q2"}]
    revealed = {"sealed-1": "Second.", "sealed-2": None}
    assert messages_of(turns, reveal=revealed.get)[1] == {"role": "assistant", "content": "A", "reasoning_content": "First.\n\nSecond."}
    assert translated(messages=turns)["messages"][1] == {"role": "assistant", "content": "A", "reasoning_content": "First."}


def test_tool_results_come_first_as_tool_messages_their_images_after() -> None:
    turns = [
        {"role": "user", "content": "Screenshot both"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "shot", "input": {}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Here you go."},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "Captured"}, {"type": "text", "text": "1920x1080"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Display not found", "is_error": True}]},
    ]
    assert messages_of(turns)[2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Captured\n1920x1080"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: Display not found"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                                     {"type": "text", "text": "Here you go."}]},
    ]


def test_a_result_of_images_only_says_so_and_an_empty_result_is_empty() -> None:
    turns = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "noop", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}}]},
            {"type": "tool_result", "tool_use_id": "toolu_2"}]},
    ]
    assert messages_of(turns)[2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "(The result is in the next message.)"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/s.png"}}]},
    ]


def test_consecutive_messages_of_a_role_are_one_turn_as_at_anthropic() -> None:
    turns = [
        {"role": "user", "content": "One."}, {"role": "user", "content": [{"type": "text", "text": "Two."}]},
        {"role": "assistant", "content": "Three"}, {"role": "assistant", "content": [{"type": "text", "text": " four."}]},
    ]
    assert messages_of(turns) == [
        {"role": "user", "content": [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]},
        {"role": "assistant", "content": "Three four."},
    ]


def test_a_system_message_in_messages_stands_where_it_is() -> None:
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
             {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]}, {"role": "user", "content": "Bye"}]
    assert messages_of(turns, system="Be brief.") == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Bye"},
    ]


def test_custom_tools_are_functions_and_anthropics_own_tools_are_left_out() -> None:
    chat = translated(tools=[WEATHER, {"type": "custom", "name": "strict_one", "input_schema": {"type": "object"}, "strict": True,
                                       "cache_control": {"type": "ephemeral"}},
                             {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}])
    assert chat["tools"] == [WEATHER_FUNCTION, {"type": "function", "function": {
        "name": "strict_one", "parameters": {"type": "object"}, "strict": True}}]
    assert "tools" not in translated(tools=[{"type": "web_search_20250305", "name": "web_search"}])


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any"}, {"tool_choice": "required"}),
    ({"type": "none"}, {"tool_choice": "none"}),
    ({"type": "tool", "name": "get_weather"}, {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ({"type": "auto", "disable_parallel_tool_use": True}, {"tool_choice": "auto", "parallel_tool_calls": False}),
    ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
    ({"type": "tool", "name": "web_search"}, {}),  # Anthropic's own tool: the caller's
])
def test_tool_choice(choice: dict[str, Any], expected: dict[str, Any]) -> None:
    chat = translated(tools=[WEATHER, {"type": "web_search_20250305", "name": "web_search"}], tool_choice=choice)
    assert {key: chat[key] for key in ("tool_choice", "parallel_tool_calls") if key in chat} == expected


@pytest.mark.parametrize(("fields", "effort"), [
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
    ({"thinking": {"type": "enabled", "budget_tokens": 4095}, "max_tokens": 8192}, "low"),
    ({"thinking": {"type": "enabled", "budget_tokens": 4096}, "max_tokens": 8192}, "medium"),
    ({"thinking": {"type": "enabled", "budget_tokens": 16383}, "max_tokens": 32000}, "medium"),
    ({"thinking": {"type": "enabled", "budget_tokens": 16384}, "max_tokens": 32000}, "high"),
    ({"thinking": {"type": "adaptive"}}, "medium"),
    ({"thinking": {"type": "disabled"}}, None),
    ({}, None),
    ({"output_config": {"effort": "max"}}, "high"),
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, "low"),
    ({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}, None),
])
def test_thinking_as_reasoning_effort(fields: dict[str, Any], effort: str | None) -> None:
    assert translated(**fields).get("reasoning_effort") == effort


def test_an_output_format_is_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    chat = translated(output_config={"format": {"type": "json_schema", "schema": schema}})
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
