"""Chat chunks in, Responses events out: the stream translation as a specification."""

from __future__ import annotations

import itertools
import json
from typing import Any

from providers.responses.translate import StreamTranslator, output_from_completion
from providers.responses.usage import usage_from_chat


def ids() -> Any:
    counter = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(counter)}"


def chunk(finish: str | None = None, **delta: Any) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def run(*chunks: dict[str, Any], status: str = "completed") -> tuple[StreamTranslator, list[dict[str, Any]]]:
    translator = StreamTranslator(make_id=ids())
    events = [event for item in chunks for event in translator.feed(item)]
    return translator, events + translator.finish(status)


def test_text_streams_as_item_part_deltas_and_dones() -> None:
    translator, events = run(chunk(role="assistant", content=""), chunk(content="Hel"), chunk(content="lo"), chunk("stop"))
    assert [e["type"] for e in events] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
    ]
    added = events[0]
    assert added["item"] == {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "status": "in_progress"}
    assert events[4]["text"] == "Hello" and events[4]["item_id"] == "msg_1" and events[4]["content_index"] == 0
    assert translator.output == [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                                  "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]}]
    assert translator.finish_reason == "stop"


def test_reasoning_comes_first_as_its_own_item() -> None:
    translator, events = run(chunk(reasoning_content="hmm"), chunk(reasoning_content=" ok"), chunk(content="answer"))
    assert [e["type"] for e in events][:6] == [
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
    ]
    reasoning, message = translator.output
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "hmm ok"}]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1]
    assert message["content"][0]["text"] == "answer"


def test_tool_calls_become_function_call_items_with_argument_deltas() -> None:
    translator, events = run(
        chunk(tool_calls=[{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get", "arguments": ""}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"x":'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": "1}"}}]),
        chunk(tool_calls=[{"index": 1, "id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}}]),
        chunk("tool_calls"),
    )
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.function_call_arguments.done", "response.output_item.done",
    ]
    assert translator.output == [
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_a", "name": "get", "arguments": '{"x":1}'},
        {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_b", "name": "put", "arguments": "{}"},
    ]


def test_text_then_a_tool_call_closes_the_message_first() -> None:
    translator, events = run(chunk(content="Let me check."), chunk(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}]))
    kinds = [e["type"] for e in events]
    assert kinds.index("response.output_item.done") < kinds.index("response.output_item.added", 1)
    assert [item["type"] for item in translator.output] == ["message", "function_call"]


def test_a_refusal_is_its_own_part() -> None:
    translator, events = run(chunk(refusal="No."))
    assert "response.refusal.delta" in [e["type"] for e in events]
    assert translator.output[0]["content"] == [{"type": "refusal", "refusal": "No."}]


def test_an_unfinished_stream_closes_items_as_incomplete() -> None:
    translator, _ = run(chunk(content="partial"), status="incomplete")
    assert translator.output[0]["status"] == "incomplete"


def test_a_whole_completion_gives_the_same_items_as_its_stream() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Checking.", "reasoning_content": "think",
        "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}
    whole = output_from_completion(completion, make_id=ids())
    whole.finish()
    _, _ = streamed = run(chunk(reasoning_content="think"), chunk(content="Checking."),
                          chunk(tool_calls=[{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get", "arguments": "{}"}}]))
    assert whole.output == streamed[0].output
    assert whole.usage == completion["usage"]


def test_usage_maps_to_the_responses_shape() -> None:
    usage = usage_from_chat({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                             "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}})
    assert usage == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0}, "output_tokens": 5,
                     "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 15}
    assert usage_from_chat(None) is None


def grammar_tool() -> Any:
    from providers.responses.client_tools import client_tools

    (tool,) = client_tools([{"type": "custom", "name": "digits", "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]+"}}])
    return tool


def custom_call(index: int, call_id: str, text: str) -> dict[str, Any]:
    return {"index": index, "id": call_id, "function": {"name": "digits", "arguments": json.dumps({"input": text})}}


def test_a_custom_call_its_grammar_refuses_is_set_aside_without_an_event_or_a_gap() -> None:
    tool = grammar_tool()
    translator = StreamTranslator(make_id=ids(), client_tool=lambda name: tool if name == "digits" else None)
    events = [event for item in (
        chunk(content="Trying."),
        chunk(tool_calls=[custom_call(0, "call_bad", "12a")]),
        chunk(tool_calls=[{"index": 1, "id": "call_f", "function": {"name": "lookup", "arguments": "{}"}}]),
        chunk("tool_calls"),
    ) for event in translator.feed(item)] + translator.finish()
    assert [(item["type"], item.get("call_id")) for item in translator.output] == [("message", None), ("function_call", "call_f")]
    assert sorted({event["output_index"] for event in events if "output_index" in event}) == [0, 1]
    assert not any(event["type"].startswith("response.custom_tool_call") for event in events)
    (rejected,) = translator.rejected
    assert rejected.item["call_id"] == "call_bad" and rejected.item["input"] == "12a"
    assert rejected.reason == "the input does not match the regex grammar at line 1, column 3, at 'a'"


def test_a_custom_call_its_grammar_accepts_takes_the_next_index_once_whole() -> None:
    tool = grammar_tool()
    translator = StreamTranslator(first_output_index=3, make_id=ids(), client_tool=lambda name: tool if name == "digits" else None)
    events = [event for item in (chunk(tool_calls=[custom_call(0, "call_ok", "123")]),
                                 chunk(tool_calls=[{"index": 1, "id": "call_f", "function": {"name": "lookup", "arguments": "{}"}}]),
                                 chunk("tool_calls")) for event in translator.feed(item)] + translator.finish()
    assert [(item["type"], item["call_id"]) for item in translator.output] == [("function_call", "call_f"), ("custom_tool_call", "call_ok")]
    added = [(event["output_index"], event["item"]["type"]) for event in events if event["type"] == "response.output_item.added"]
    assert added == [(3, "function_call"), (4, "custom_tool_call")] and translator.rejected == []


def test_a_cut_off_custom_call_is_not_checked() -> None:
    tool = grammar_tool()
    translator = StreamTranslator(make_id=ids(), client_tool=lambda name: tool)
    translator.feed(chunk(tool_calls=[custom_call(0, "call_cut", "12a")]))
    translator.finish("incomplete")
    assert translator.rejected == [] and translator.output[0]["input"] == "12a"
