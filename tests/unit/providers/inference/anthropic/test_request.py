"""Chat completion requests as Anthropic Messages requests: golden pairs, one feature each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from contract.errors import InvalidRequestError
from providers.inference.anthropic.request import JSON_OBJECT_INSTRUCTION, Settings, messages_request

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
SIGNED = {"type": "thinking", "thinking": "I should look it up.", "signature": "sig_abc"}


def nothing(message: Mapping[str, Any]) -> Sequence[Mapping[str, str]]:
    return ()


def translate(chat: dict[str, Any], settings: Settings = Settings(), **kwargs: Any) -> dict[str, Any]:
    return messages_request({"model": "claude", **chat}, settings, kwargs.pop("recall", nothing), **kwargs).body


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_a_plain_request_gets_the_default_max_tokens_and_its_system_prompt_as_blocks() -> None:
    assert translate({"messages": [{"role": "system", "content": "Be brief."}, {"role": "developer", "content": "Use French."},
                                   user("Hi")]}) == {
        "model": "claude", "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use French."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    }


def test_the_client_cap_stops_and_sampling_are_mapped_temperature_clamped_to_anthropics_range() -> None:
    body = translate({"messages": [user("Hi")], "max_completion_tokens": 100, "stop": "END", "temperature": 1.6, "top_p": 0.9,
                      "top_k": 40, "user": "user-7", "seed": 3})
    assert body == {"model": "claude", "max_tokens": 100, "messages": [user([{"type": "text", "text": "Hi"}])],
                    "stop_sequences": ["END"], "temperature": 1.0, "top_p": 0.9, "top_k": 40, "metadata": {"user_id": "user-7"}}
    assert translate({"messages": [user("Hi")], "max_tokens": 7, "stop": ["a", "b"]})["stop_sequences"] == ["a", "b"]


def test_consecutive_messages_of_a_role_are_merged_and_empty_text_is_left_out() -> None:
    body = translate({"messages": [user("one"), user([{"type": "text", "text": "two"}, {"type": "text", "text": ""}]),
                                   {"role": "assistant", "content": ""}, {"role": "assistant", "content": "three"}, user("four")]})
    assert body["messages"] == [
        user([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]),
        {"role": "assistant", "content": [{"type": "text", "text": "three"}]},
        user([{"type": "text", "text": "four"}]),
    ]


def test_images_and_pdf_files_become_image_and_document_blocks() -> None:
    body = translate({"messages": [user([
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
        {"type": "file", "file": {"file_data": "data:text/plain;base64,aGVsbG8="}},
        {"type": "text", "text": "What are these?"},
    ])]})
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}, "title": "a.pdf"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}},
        {"type": "text", "text": "What are these?"},
    ]


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "messages[0].content[0]"),
    ({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}, "messages[0].content[0].image_url.url"),
    ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}, "messages[0].content[0].image_url.url"),
    ({"type": "file", "file": {"file_id": "file-123"}}, "messages[0].content[0].file"),
])
def test_a_part_anthropic_cannot_take_is_a_400_naming_it(part: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        translate({"messages": [user([part])]})
    assert caught.value.param == param


def test_tool_calls_become_tool_use_and_consecutive_tool_results_one_user_turn_in_order() -> None:
    calls = [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]
    body = translate({"tools": [WEATHER], "messages": [
        user("Weather?"), {"role": "assistant", "content": "Looking.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
        user("Thanks"),
    ]})
    assert body["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
                                     {"type": "text", "text": "Thanks"}]},
    ]
    assert "is_error" not in str(body)
    assert body["tools"] == [{"name": "get_weather", "description": "The weather in a city",
                              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def test_tool_results_come_first_in_their_turn_whatever_order_the_client_sent() -> None:
    call = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    body = translate({"messages": [user("Weather?"), {"role": "assistant", "content": None, "tool_calls": [call]}, user("also"),
                                   {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]})
    assert [block["type"] for block in body["messages"][2]["content"]] == ["tool_result", "text"]


@pytest.mark.parametrize(("choice", "parallel", "expected"), [
    ("auto", None, {"type": "auto"}),
    ("required", None, {"type": "any"}),
    ("none", None, {"type": "none"}),
    ({"type": "function", "function": {"name": "get_weather"}}, None, {"type": "tool", "name": "get_weather"}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    (None, None, None),
])
def test_tool_choice_and_parallel_tool_calls(choice: Any, parallel: Any, expected: Any) -> None:
    chat: dict[str, Any] = {"messages": [user("Hi")], "tools": [WEATHER]}
    if choice is not None:
        chat["tool_choice"] = choice
    if parallel is not None:
        chat["parallel_tool_calls"] = parallel
    assert translate(chat).get("tool_choice") == expected


def test_a_json_schema_response_format_is_a_forced_tool_named_after_the_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    translation = messages_request({"model": "claude", "messages": [user("Where?")],
                                    "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}},
                                   Settings(), nothing)
    assert translation.schema_tool == "place"
    assert translation.body["tools"][-1]["name"] == "place" and translation.body["tools"][-1]["input_schema"] == schema
    assert translation.body["tool_choice"] == {"type": "tool", "name": "place"}
    with_tools = translate({"messages": [user("Where?")], "tools": [WEATHER],
                            "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}})
    assert with_tools["tool_choice"] == {"type": "any"}  # a call of theirs, or the answer


def test_a_json_object_response_format_is_an_instruction() -> None:
    body = translate({"messages": [user("List three colors.")], "response_format": {"type": "json_object"}})
    assert body["system"] == [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]


def test_reasoning_effort_turns_thinking_on_with_its_budget_above_the_answer_cap() -> None:
    body = translate({"messages": [user("Hi")], "reasoning_effort": "medium", "temperature": 0.2})
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert body["max_tokens"] == 4096 + 8192 and "temperature" not in body
    assert translate({"messages": [user("Hi")], "reasoning_effort": "low", "max_tokens": 10_000})["max_tokens"] == 10_000
    assert translate({"messages": [user("Hi")], "reasoning_effort": "low", "max_tokens": 500})["max_tokens"] == 2548
    assert "thinking" not in translate({"messages": [user("Hi")], "reasoning_effort": "none"})
    adaptive = translate({"messages": [user("Hi")], "reasoning_effort": "high"}, Settings(thinking="adaptive"))
    assert adaptive["thinking"] == {"type": "adaptive"} and adaptive["output_config"] == {"effort": "high"}
    assert adaptive["max_tokens"] == 4096


def test_a_forced_tool_turns_thinking_off() -> None:
    assert "thinking" not in translate({"messages": [user("Hi")], "tools": [WEATHER], "tool_choice": "required", "reasoning_effort": "low"})


def test_the_thinking_of_a_tool_turn_goes_back_first_and_without_it_thinking_is_turned_off() -> None:
    call = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    messages = [user("Weather?"), {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": "I should look it up."},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]
    signed = translate({"messages": messages, "tools": [WEATHER], "reasoning_effort": "low"}, recall=lambda message: (SIGNED,))
    assert signed["messages"][1]["content"][0] == SIGNED and signed["thinking"]["type"] == "enabled"
    unsigned = translate({"messages": messages, "tools": [WEATHER], "reasoning_effort": "low"})
    assert unsigned["messages"][1]["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]
    assert "thinking" not in unsigned


def test_cache_control_a_client_put_on_parts_messages_and_tools_is_kept() -> None:
    ephemeral = {"type": "ephemeral"}
    body = translate({"tools": [{**WEATHER, "cache_control": ephemeral}], "messages": [
        {"role": "system", "content": "Long rules.", "cache_control": ephemeral},
        user([{"type": "text", "text": "A long document", "cache_control": {"type": "ephemeral", "ttl": "1h"}}, {"type": "text", "text": "?"}]),
    ]})
    assert body["system"] == [{"type": "text", "text": "Long rules.", "cache_control": ephemeral}]
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert body["tools"][0]["cache_control"] == ephemeral


def test_cache_auto_puts_breakpoints_on_tools_system_and_the_last_two_user_turns_at_most_four() -> None:
    messages = [{"role": "system", "content": "Rules."}, user("one"), {"role": "assistant", "content": "two"}, user("three")]
    body = translate({"messages": messages, "tools": [WEATHER]}, Settings(cache=True))
    marked = [body["tools"][0], body["system"][0], body["messages"][0]["content"][0], body["messages"][2]["content"][0]]
    assert all(block.get("cache_control") == {"type": "ephemeral"} for block in marked)
    assert "cache_control" not in body["messages"][1]["content"][0]
    clients = [{**user([{"type": "text", "text": str(n), "cache_control": {"type": "ephemeral"}}])} for n in range(3)]
    crowded = translate({"messages": [{"role": "system", "content": "Rules."}, *clients], "tools": [WEATHER]}, Settings(cache=True))
    assert str(crowded).count("cache_control") == 4  # the client's three and the tools'


@pytest.mark.parametrize(("field", "value"), [("n", 2), ("logprobs", True), ("top_logprobs", 3), ("logit_bias", {"1": 5}),
                                              ("presence_penalty", 0.5), ("frequency_penalty", 1), ("modalities", ["text", "audio"])])
def test_what_anthropic_cannot_do_is_a_400_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        translate({"messages": [user("Hi")], field: value})
    assert caught.value.param == field and caught.value.code == "unsupported_parameter"


def test_a_custom_tool_and_an_unknown_effort_are_400s() -> None:
    with pytest.raises(InvalidRequestError, match="tools\\[0\\].type"):
        translate({"messages": [user("Hi")], "tools": [{"type": "custom", "custom": {"name": "patch"}}]})
    with pytest.raises(InvalidRequestError, match="reasoning_effort"):
        translate({"messages": [user("Hi")], "reasoning_effort": "extreme"})


def test_the_stream_flag_is_set_for_a_stream() -> None:
    assert translate({"messages": [user("Hi")], "stream": True, "stream_options": {"include_usage": True}}, stream=True)["stream"] is True


def test_with_thinking_off_the_thinking_blocks_stay_home_and_a_turn_left_empty_goes() -> None:
    messages = [user("one"), {"role": "assistant", "content": None, "reasoning_content": "hmm"}, user("two"),
                {"role": "assistant", "content": "Sure.", "reasoning_content": "I should look it up."}, user("three")]
    body = translate({"messages": messages}, recall=lambda message: (SIGNED,))
    assert body["messages"] == [user([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]),
                                {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]}, user([{"type": "text", "text": "three"}])]
    forced = translate({"messages": messages, "reasoning_effort": "low", "tools": [WEATHER], "tool_choice": "required"},
                       recall=lambda message: (SIGNED,))
    assert "thinking" not in str(forced["messages"])
    kept = translate({"messages": messages, "reasoning_effort": "low"}, recall=lambda message: (SIGNED,))
    assert kept["messages"][1]["content"][0] == SIGNED


def test_allowed_tools_narrows_the_tools_to_those_it_names() -> None:
    other = {"type": "function", "function": {"name": "get_time"}}
    body = translate({"messages": [user("Hi")], "tools": [WEATHER, other], "tool_choice": {
        "type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}})
    assert [tool["name"] for tool in body["tools"]] == ["get_time"] and body["tool_choice"] == {"type": "any"}
