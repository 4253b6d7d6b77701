"""Responses stream events in, Anthropic stream events out: `providers/messages/response_stream.py`
as a specification. Every event is checked by the anthropic SDK's own (beta) types, and the
stream, put back together by the SDK's own accumulator, is the Message the same response gives
whole (`from_response.py`). The answers' text and citations come from the Responses side's own
citation reader (`contract.tool_runtime.citations`), fed the model's tokens."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx2
from anthropic.lib.streaming._beta_messages import accumulate_event
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from pydantic import TypeAdapter

from contract.tool_runtime.citations import MarkerCitations, Source
from providers.messages.from_response import message_from_response
from providers.messages.response_stream import ResponseStream
from providers.messages.stream import Event

EVENT = TypeAdapter(BetaRawMessageStreamEvent)
FOG, TIDES = "https://www.lighthouses.example.com/fog", "https://tides.example.org/harbour"
PAGES = [{"type": "url", "url": FOG, "title": "Fog signals", "text": "In fog the keeper sounds the horn twice a minute."},
         {"type": "url", "url": TIDES, "title": "Harbour tide tables", "text": "High water at the harbour is at 06:12 and 18:40 today."}]
TOKENS = ["In fog", " the keeper", " sounds the", " horn [", "1]. High", " water is", " at 06:12 [2", "]."]
USAGE = {"input_tokens": 90, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}}


def sealed(result: Mapping[str, Any]) -> str:
    return f"sealed:{json.dumps(result, sort_keys=True)}"


def item_events(item: dict[str, Any], index: int, *between: dict[str, Any]) -> list[dict[str, Any]]:
    added = {**item, "status": "in_progress"}
    return [{"type": "response.output_item.added", "output_index": index, "item": added}, *between,
            {"type": "response.output_item.done", "output_index": index, "item": item}]


def message_events(index: int, tokens: list[str], sources: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A message item's events as the Responses translator sends them: each delta, then the annotations its text ends at."""
    citations = MarkerCitations([Source({"type": "url_citation", "url": s["url"], "title": s["title"]}, s["text"]) for s in sources]) \
        if sources else None
    base = {"item_id": "msg_1", "output_index": index, "content_index": 0}
    events: list[dict[str, Any]] = [{"type": "response.content_part.added", **base, "part": {"type": "output_text", "text": ""}}]
    text, annotations = "", []
    for token in [*tokens, None]:
        if citations is None:
            piece, found = token or "", []
        else:
            piece, found = citations.feed(token) if token is not None else citations.finish()
        if piece:
            events.append({"type": "response.output_text.delta", **base, "delta": piece})
            text += piece
        for annotation in found:
            events.append({"type": "response.output_text.annotation.added", **base, "annotation_index": len(annotations),
                           "annotation": annotation})
            annotations.append(annotation)
    events.append({"type": "response.output_text.done", **base, "text": text})
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": annotations}]}
    return item_events(item, index, *events), item


def run(events: list[dict[str, Any]], web_search: bool = True) -> list[Event]:
    stream = ResponseStream("claude-sonnet", web_search=web_search, sign=lambda text: f"signed({text})", seal_result=sealed)
    translated = stream.start() + [out for event in events for out in stream.feed(event)]
    for name, data in translated:
        assert EVENT.validate_python(data).type == name  # every event is one of the SDK's, named by its type
    return translated


def accumulated(events: list[Event]) -> dict[str, Any]:
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for _, data in events:
        snapshot = accumulate_event(event=EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=json_bufs,
                                    request_headers=httpx2.Headers())
    dumped: dict[str, Any] = BetaMessage.model_validate(snapshot.to_dict()).model_dump(exclude={"id"})
    return dumped


def whole(output: list[dict[str, Any]], web_search: bool = True, **response: Any) -> dict[str, Any]:
    answer = {"status": "completed", "output": output, "usage": USAGE, "incomplete_details": None, **response}
    message = message_from_response(answer, "claude-sonnet", web_search=web_search, sign=lambda text: f"signed({text})", seal_result=sealed)
    dumped: dict[str, Any] = BetaMessage.model_validate(message).model_dump(exclude={"id"})
    return dumped


def completed(output: list[dict[str, Any]], **response: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": {"status": "completed", "output": output, "usage": USAGE,
                                                       "incomplete_details": None, **response}}


def test_a_search_then_a_cited_answer_streams_as_anthropic_streams_it() -> None:
    search = {"id": "ws_abc", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "fog horn", "queries": ["fog horn"], "sources": PAGES}}
    answer_events, answer = message_events(1, TOKENS, PAGES)
    events = run([*item_events(search, 0), *answer_events, completed([search, answer])])
    assert [(name, data.get("content_block", data.get("delta", {})).get("type")) for name, data in events[1:]] == [
        ("content_block_start", "server_tool_use"), ("content_block_delta", "input_json_delta"), ("content_block_stop", None),
        ("content_block_start", "web_search_tool_result"), ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "citations_delta"), ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "text_delta"), ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "citations_delta"), ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "text_delta"), ("content_block_stop", None),
        ("message_delta", None), ("message_stop", None)]
    assert events[1][1]["content_block"] == {"type": "server_tool_use", "id": "srvtoolu_abc", "name": "web_search", "input": {}}
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2][1]["usage"] == {"input_tokens": 90, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 20,
                                      "output_tokens_details": {"thinking_tokens": 0},
                                      "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}
    folded = accumulated(events)
    assert [block.get("text") for block in folded["content"][2:]] == ["In fog the keeper sounds the horn", ". ", "High water is at 06:12", "."]
    assert folded == whole([search, answer])


def test_mcp_calls_thinking_and_a_client_call() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Echo it."}]}
    listing = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "demo", "tools": [], "error": None}
    call = {"id": "mcp_abc", "type": "mcp_call", "server_label": "demo", "name": "echo", "arguments": '{"text": "hi"}', "output": "echo: hi",
            "error": None, "status": "completed"}
    answer_events, answer = message_events(3, ["Tool result:", " echo: hi"], None)
    function = {"id": "fc_1", "type": "function_call", "call_id": "call_a1", "name": "get_weather", "arguments": '{"city": "Paris"}',
                "status": "completed"}
    thinking = [{"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": part} for part in ("Echo", " it.")]
    arguments = [{"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": part} for part in ('{"city": ', '"Paris"}')]
    events = run([*item_events(reasoning, 0, *thinking), *item_events(listing, 1), *item_events(call, 2), *answer_events,
                  *item_events(function, 4, *arguments), completed([reasoning, listing, call, answer, function])], web_search=False)
    kinds = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    assert kinds == ["thinking", "mcp_tool_use", "mcp_tool_result", "text", "tool_use"]
    texts = [data["delta"]["text"] for name, data in events if name == "content_block_delta" and data["delta"]["type"] == "text_delta"]
    assert texts == ["Tool result:", " echo: hi"]  # without a web search, text goes on as it comes
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and "server_tool_use" not in events[-2][1]["usage"]
    assert accumulated(events) == whole([reasoning, listing, call, answer, function], web_search=False)


def test_an_answer_citing_nothing_cites_its_sources_over_the_whole_of_it() -> None:
    search = {"id": "ws_abc", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "fog", "queries": ["fog"], "sources": PAGES[:1]}}
    answer_events, answer = message_events(1, ["In fog", " the keeper sounds", " the horn twice a minute."], PAGES[:1])
    assert answer["content"][0]["annotations"][0]["start_index"] == 0  # the citation reader's fallback, over the whole answer
    events = run([*item_events(search, 0), *answer_events, completed([search, answer])])
    folded = accumulated(events)
    assert folded == whole([search, answer])
    assert folded["content"][2]["text"] == "In fog the keeper sounds the horn twice a minute." and len(folded["content"][2]["citations"]) == 1


def test_the_tool_loops_turns_spent_is_pause_turn() -> None:
    events = run([{"type": "response.incomplete", "response": {"status": "incomplete", "output": [], "usage": USAGE,
                                                               "incomplete_details": {"reason": "max_messages"}}}])
    assert events[-2][1]["delta"]["stop_reason"] == "pause_turn"


def test_a_failure_is_anthropics_error_event_and_ends_the_stream() -> None:
    stream = ResponseStream("claude-sonnet", web_search=False, seal_result=sealed)
    stream.start()
    failed = {"type": "response.failed", "response": {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "Slow down."}}}
    assert stream.feed(failed) == [("error", {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down."}})]
    assert stream.ended and stream.failure == ("rate_limit_exceeded", "Slow down.")
    other = ResponseStream("claude-sonnet", web_search=False, seal_result=sealed)
    assert other.feed({"type": "error", "code": "server_error", "message": "Broken."}) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "Broken."}})]
