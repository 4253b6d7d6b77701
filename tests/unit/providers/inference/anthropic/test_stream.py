"""Anthropic's stream events as chat completion chunks, fed the events the fake upstream sends."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contract.errors import UpstreamError
from fake_anthropic.answers import plan_message, render_events
from fake_anthropic.checks import sign
from providers.inference.anthropic.stream import StreamTranslator

TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def events(text: str, **body: Any) -> list[dict[str, Any]]:
    request = {"model": "claude-fake-sonnet", "max_tokens": 100, "messages": [{"role": "user", "content": text}], **body}
    frames = render_events(plan_message(request, json.dumps(request).encode()))
    return [json.loads(frame.split(b"data: ", 1)[1]) for frame in frames]


def chunks(feed: list[dict[str, Any]], **options: Any) -> tuple[StreamTranslator, list[dict[str, Any]]]:
    translator = StreamTranslator("claude", **options)
    out = [chunk for event in feed for chunk in translator.feed(event)]
    return translator, out


def deltas(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [chunk["choices"][0]["delta"] for chunk in out if chunk["choices"]]


def test_text_streams_as_content_after_the_role_then_the_finish_and_the_usage_when_asked() -> None:
    translator, out = chunks(events("Hi"), include_usage=True)
    assert deltas(out)[0] == {"role": "assistant", "content": ""}
    assert "".join(delta.get("content", "") for delta in deltas(out)) == "Hello from the fake Anthropic upstream."
    assert out[-2]["choices"][0]["finish_reason"] == "stop"
    assert out[-1]["choices"] == [] and out[-1]["usage"]["completion_tokens"] == 6
    assert {chunk["id"] for chunk in out} == {out[0]["id"]} and out[0]["id"].startswith("msg_")
    translator.ended()
    _, quiet = chunks(events("Hi"))
    assert all(chunk["choices"] for chunk in quiet)


def test_thinking_streams_as_reasoning_then_its_whole_signed_block() -> None:
    translator, out = chunks(events("Hi [thinking]"))
    reasoning = "".join(delta.get("reasoning_content", "") for delta in deltas(out))
    assert reasoning.startswith("Let me think")
    block = next(delta["thinking_blocks"] for delta in deltas(out) if "thinking_blocks" in delta)
    assert block == [{"type": "thinking", "thinking": reasoning, "signature": sign(reasoning)}]
    assert translator.thinking == block and "".join(translator.reasoning) == reasoning


def test_a_redacted_block_is_passed_whole() -> None:
    translator, out = chunks(events("Hi [redacted]"))
    block = next(delta["thinking_blocks"] for delta in deltas(out) if "thinking_blocks" in delta)
    assert block[0]["type"] == "redacted_thinking" and block[0]["data"].startswith("redacted_")


def test_tool_use_streams_as_tool_call_deltas_indexed_by_their_place_among_the_calls() -> None:
    translator, out = chunks(events('Go [thinking] [tool:get_weather {"city": "Paris"}] [tool:get_weather {"city": "Rome"}]', tools=TOOLS))
    calls = [call for delta in deltas(out) for call in delta.get("tool_calls", ())]
    assert [(call["index"], call.get("id"), call["function"].get("name")) for call in calls if call.get("id")] == [
        (0, translator.calls[0], "get_weather"), (1, translator.calls[1], "get_weather")]
    for index, city in ((0, "Paris"), (1, "Rome")):
        assert json.loads("".join(call["function"]["arguments"] for call in calls if call["index"] == index)) == {"city": city}
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_the_schema_tools_input_streams_as_content() -> None:
    schema_tools = [{"name": "place", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    _, out = chunks(events("Where?", tools=schema_tools, tool_choice={"type": "tool", "name": "place"}), schema_tool="place")
    assert json.loads("".join(delta.get("content", "") for delta in deltas(out))) == {"city": "text"}
    assert out[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_call_without_arguments_gets_an_empty_object() -> None:
    feed = [{"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 1, "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}, {"type": "message_stop"}]
    _, out = chunks(feed)
    assert [call["function"]["arguments"] for delta in deltas(out) for call in delta.get("tool_calls", ())] == ["", "{}"]


def test_an_error_event_raises_the_error_it_stands_for_and_a_cut_stream_is_an_error() -> None:
    translator = StreamTranslator("claude")
    with pytest.raises(UpstreamError) as caught:
        for event in events("Hi [stream_error]"):
            translator.feed(event)
    assert caught.value.status == 503 and caught.value.message == "Overloaded"
    with pytest.raises(UpstreamError, match="message_stop"):
        translator.ended()
