"""Tool calls for a model without a tool format: the prompt, the messages, reading a call back."""

from __future__ import annotations

import json

import pytest

from providers.inference.local.tool_calls import OPEN, parse_call, tool_message, tools_prompt

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_the_prompt_names_each_tool_with_its_schema_and_the_format() -> None:
    prompt = tools_prompt([WEATHER])
    assert OPEN in prompt and "- get_weather: Weather now. Arguments: " in prompt and '"city"' in prompt


def test_a_call_is_read_back_as_name_and_arguments() -> None:
    assert parse_call(' <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>') == (
        "get_weather", '{"city": "Paris"}')
    assert parse_call("It is sunny.") is None
    assert parse_call("<tool_call>not json</tool_call>") is None


def test_calls_and_results_in_the_history_become_text_any_template_renders() -> None:
    assistant = tool_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]})
    assert assistant == {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'}
    assert tool_message({"role": "tool", "tool_call_id": "c1", "content": "sunny"}) == {"role": "user", "content": "Tool result: sunny"}
    parts = tool_message({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}},
                                                      {"type": "text", "text": "b"}]})
    assert parts == {"role": "user", "content": "ab"}
    assert json.loads(assistant["content"][len(OPEN):-len("</tool_call>")])["arguments"] == {"city": "Rome"}


def test_with_no_tools_offered_the_calls_in_the_history_are_left_out_and_their_results_kept() -> None:
    """A small model shown its calls in its history, as markup or in words, writes them again as its
    answer when there is no tool to call; what they returned stays."""
    calls = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]
    assert tool_message({"role": "assistant", "content": None, "tool_calls": calls}, tools_offered=False) is None
    assert tool_message({"role": "assistant", "content": "Checking.", "tool_calls": calls}, tools_offered=False) == {
        "role": "assistant", "content": "Checking."}
    assert tool_message({"role": "tool", "tool_call_id": "c1", "content": "sunny"}, tools_offered=False) == {
        "role": "user", "content": "Tool result: sunny"}


def test_tool_call_markup_is_taken_out_of_text_whole_or_cut_off_at_the_end() -> None:
    from providers.inference.local.tool_calls import without_markup

    text = 'It is <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>sunny. <tool_call>{"name": "x'
    assert without_markup(text) == "It is sunny. "
    assert without_markup("a < b, and <tool is not a call") == "a < b, and <tool is not a call"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 11, 64])
def test_a_stream_loses_the_markup_whatever_pieces_it_comes_in(size: int) -> None:
    from providers.inference.local.tool_calls import MarkupFilter, without_markup

    text = 'Sure. <tool_call>{"name": "f", "arguments": {}}</tool_call> The answer <is> 4. <tool_call>{"name'
    markup = MarkupFilter()
    out = "".join(markup.feed(text[start:start + size]) for start in range(0, len(text), size)) + markup.end()
    assert out == without_markup(text) == "Sure.  The answer <is> 4. "
