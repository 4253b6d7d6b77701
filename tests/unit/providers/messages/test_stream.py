"""Chat chunks in, Anthropic stream events out: the translation as a specification, each event
checked by the anthropic SDK's own types, and the stream put back together by the SDK's own
accumulator into the Message a whole answer gives."""

from __future__ import annotations

import json
import re
from typing import Any

from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from providers.messages.response import message_from_chat
from providers.messages.stream import Event, MessageStream, sse_frame

EVENT = TypeAdapter(RawMessageStreamEvent)


def chunk(finish: str | None = None, **delta: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "qwen",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call(index: int, arguments: str, id: str | None = None, name: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        part.update(id=id, type="function")
        part["function"]["name"] = name
    return part


USAGE = {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160, "prompt_tokens_details": {"cached_tokens": 100}}

# As vLLM streams it: the role, text, two parallel calls with their arguments in pieces, the
# finish, then the usage in a chunk of no choices.
CHUNKS = [
    chunk(role="assistant", content=""),
    chunk(content="Let me"),
    chunk(content=" check both."),
    chunk(tool_calls=[call(0, "", id="call_a1", name="get_weather")]),
    chunk(tool_calls=[call(0, '{"city": ')]),
    chunk(tool_calls=[call(0, '"Paris"}')]),
    chunk(tool_calls=[call(1, '{"zone"', id="call_b2", name="get_time")]),
    chunk(content=""),
    chunk(tool_calls=[call(1, ': "CET"}')]),
    chunk("tool_calls"),
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "qwen", "choices": [], "usage": USAGE},
]

# The same answer, whole.
COMPLETION = {"id": "chatcmpl-1", "object": "chat.completion", "model": "qwen", "usage": USAGE, "choices": [{
    "index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me check both.", "tool_calls": [
        {"id": "call_a1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b2", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "CET"}'}}]}}]}


def run(stream: MessageStream, chunks: list[dict[str, Any]]) -> list[Event]:
    events = stream.start() + [event for item in chunks for event in stream.feed(item)] + stream.finish()
    for name, data in events:
        assert EVENT.validate_python(data).type == name  # every event is one of the SDK's, named by its type
    return events


def accumulated(events: list[Event]) -> dict[str, Any]:
    """The Message the anthropic SDK's own accumulator builds from the events."""
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for _, data in events:
        snapshot = accumulate_event(event=EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=json_bufs)
    dumped: dict[str, Any] = Message.model_validate(snapshot.to_dict()).model_dump()
    return dumped


def test_text_then_two_parallel_tool_calls_then_usage() -> None:
    stream = MessageStream("claude-sonnet", input_tokens=20)
    events = run(stream, CHUNKS)
    start = events[0][1]["message"]
    assert re.fullmatch(r"msg_[0-9a-f]{24}", start.pop("id"))
    assert start == {
        "type": "message", "role": "assistant", "model": "claude-sonnet", "content": [], "stop_reason": None, "stop_sequence": None,
        "stop_details": None, "usage": {"input_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                                        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                                        "output_tokens": 1, "service_tier": "standard", "inference_geo": "not_available"}}

    def delta(index: int, body: dict[str, Any]) -> Event:
        return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": body}

    assert events[1:] == [
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        delta(0, {"type": "text_delta", "text": "Let me"}),
        delta(0, {"type": "text_delta", "text": " check both."}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_a1", "name": "get_weather", "input": {}}}),
        delta(1, {"type": "input_json_delta", "partial_json": '{"city": '}),
        delta(1, {"type": "input_json_delta", "partial_json": '"Paris"}'}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("content_block_start", {"type": "content_block_start", "index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_b2", "name": "get_time", "input": {}}}),
        delta(2, {"type": "input_json_delta", "partial_json": '{"zone"'}),
        delta(2, {"type": "input_json_delta", "partial_json": ': "CET"}'}),
        ("content_block_stop", {"type": "content_block_stop", "index": 2}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {
            "input_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 100, "output_tokens": 40}}),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_the_sdks_accumulator_builds_the_message_a_whole_answer_gives() -> None:
    streamed = accumulated(run(MessageStream("claude-sonnet"), CHUNKS))
    whole = Message.model_validate(message_from_chat(COMPLETION, "claude-sonnet")).model_dump()
    streamed.pop("id"), whole.pop("id")
    assert streamed == whole
    assert streamed["content"][1]["input"] == {"city": "Paris"} and streamed["usage"]["cache_read_input_tokens"] == 100


def test_thinking_is_signed_before_it_closes_and_both_ways_agree() -> None:
    def sign(text: str) -> str:
        return f"sig:{len(text)}"

    chunks = [chunk(role="assistant", reasoning_content="Two "), chunk(reasoning_content="cities."), chunk(content="Sunny."),
              chunk("stop"), {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9,
                                                       "completion_tokens_details": {"reasoning_tokens": 4}}}]
    events = run(MessageStream("m", sign=sign), chunks)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[4][1]["delta"] == {"type": "signature_delta", "signature": "sig:11"}
    assert events[-2][1]["usage"]["output_tokens_details"] == {"thinking_tokens": 4}
    whole = message_from_chat({"choices": [{"finish_reason": "stop", "message": {"reasoning_content": "Two cities.", "content": "Sunny."}}],
                               "usage": chunks[-1]["usage"]}, "m", sign=sign)
    streamed = accumulated(events)
    assert streamed["content"] == Message.model_validate(whole).model_dump()["content"]
    assert streamed["usage"]["output_tokens_details"] == {"thinking_tokens": 4}


def test_without_sign_a_thinking_block_has_no_signature_delta() -> None:
    events = run(MessageStream("m"), [chunk(reasoning="Hmm."), chunk("stop")])
    assert [name for name, _ in events][1:4] == ["content_block_start", "content_block_delta", "content_block_stop"]


def test_empty_deltas_open_nothing() -> None:
    events = run(MessageStream("m"), [chunk(role="assistant", content=""), chunk(content=None), chunk("stop")])
    assert [name for name, _ in events] == ["message_start", "message_delta", "message_stop"]
    assert events[1][1] == {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": 0}}


def test_a_matched_stop_sequence_and_a_cut_off_answer() -> None:
    matched = run(MessageStream("m", stop_sequences=["###"]), [chunk(content="a"), {"choices": [
        {"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "###"}]}])
    assert matched[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    cut = run(MessageStream("m"), [chunk(content="a"), chunk("length")])
    assert cut[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}


def test_a_call_whose_name_comes_after_its_id_opens_when_named() -> None:
    chunks = [chunk(tool_calls=[{"index": 0, "id": "call_x", "type": "function", "function": {"arguments": ""}}]),
              chunk(tool_calls=[{"index": 0, "function": {"name": "f", "arguments": '{"a":'}}]),
              chunk(tool_calls=[{"index": 0, "function": {"arguments": " 1}"}}]), chunk("tool_calls")]
    events = run(MessageStream("m"), chunks)
    assert [data.get("content_block", data.get("delta")) for name, data in events if name.startswith("content_block_") and
            name != "content_block_stop"] == [
        {"type": "tool_use", "id": "toolu_x", "name": "f", "input": {}},
        {"type": "input_json_delta", "partial_json": '{"a":'},
        {"type": "input_json_delta", "partial_json": " 1}"}]
    assert accumulated(events)["content"][0]["input"] == {"a": 1}


def test_sse_frame() -> None:
    frame = sse_frame("message_stop", {"type": "message_stop"})
    assert frame == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    assert json.loads(sse_frame("x", {"text": "é"}).split(b"data: ")[1]) == {"text": "é"}
