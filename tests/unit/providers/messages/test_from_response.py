"""A Responses `Response` in, an Anthropic Message out: golden pairs for each rule of
`providers/messages/from_response.py`, every Message checked by the anthropic SDK's own types
(the beta one where MCP blocks are in it: Anthropic's MCP connector is a beta)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from anthropic.types import Message
from anthropic.types.beta import BetaMessage

from providers.messages.from_response import message_from_response, text_blocks

FOG, TIDES = "https://www.lighthouses.example.com/fog", "https://tides.example.org/harbour"
SOURCES = [{"type": "url", "url": FOG, "title": "Fog signals", "text": "Ships keep off the rocks. In fog the keeper sounds the horn twice a minute."},
           {"type": "url", "url": TIDES, "title": "Harbour tide tables", "text": "High water at the harbour is at 06:12 and 18:40 today."}]
ANSWER = "In fog the keeper sounds the horn. High water is at 06:12."
ANNOTATIONS = [{"type": "url_citation", "url": FOG, "title": "Fog signals", "start_index": 0, "end_index": 33},
               {"type": "url_citation", "url": TIDES, "title": "Harbour tide tables", "start_index": 35, "end_index": 57}]
USAGE = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20}, "output_tokens": 30,
         "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 150}


def sealed(result: Mapping[str, Any]) -> str:
    return f"sealed:{json.dumps(result, sort_keys=True)}"


def response(*output: dict[str, Any], status: str = "completed", reason: str | None = None) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": list(output), "usage": USAGE,
            "incomplete_details": {"reason": reason} if reason else None}


def search(item_id: str = "ws_abc", status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "web_search_call", "status": status,
            "action": {"type": "search", "query": "fog horn", "queries": ["fog horn"], "sources": SOURCES if status == "completed" else None}}


def message(text: str = ANSWER, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": annotations or [], "logprobs": []}]}


def translated(answer: dict[str, Any], beta: bool = False, web_search: bool = True) -> dict[str, Any]:
    result = message_from_response(answer, "claude-sonnet", web_search=web_search, sign=lambda text: f"signed({text})", seal_result=sealed)
    (BetaMessage if beta else Message).model_validate(result)  # the SDK's own type: the shape is Anthropic's
    return result


def test_a_search_its_results_and_an_answer_split_at_its_citations() -> None:
    result = translated(response(search(), message(annotations=ANNOTATIONS)))
    assert result["content"] == [
        {"type": "server_tool_use", "id": "srvtoolu_abc", "name": "web_search", "input": {"query": "fog horn"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_abc", "content": [
            {"type": "web_search_result", "url": FOG, "title": "Fog signals", "page_age": None,
             "encrypted_content": sealed({"url": FOG, "title": "Fog signals", "text": SOURCES[0]["text"]})},
            {"type": "web_search_result", "url": TIDES, "title": "Harbour tide tables", "page_age": None,
             "encrypted_content": sealed({"url": TIDES, "title": "Harbour tide tables", "text": SOURCES[1]["text"]})}]},
        {"type": "text", "text": "In fog the keeper sounds the horn", "citations": [
            {"type": "web_search_result_location", "url": FOG, "title": "Fog signals", "cited_text": "In fog the keeper sounds the horn twice a minute.",
             "encrypted_index": result["content"][2]["citations"][0]["encrypted_index"]}]},
        {"type": "text", "text": ". "},
        {"type": "text", "text": "High water is at 06:12", "citations": [
            {"type": "web_search_result_location", "url": TIDES, "title": "Harbour tide tables",
             "cited_text": "High water at the harbour is at 06:12 and 18:40 today.",
             "encrypted_index": result["content"][4]["citations"][0]["encrypted_index"]}]},
        {"type": "text", "text": "."}]
    assert result["stop_reason"] == "end_turn"
    assert result["usage"]["server_tool_use"] == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert (result["usage"]["input_tokens"], result["usage"]["cache_read_input_tokens"], result["usage"]["output_tokens"]) == (100, 20, 30)
    assert result["usage"]["output_tokens_details"] == {"thinking_tokens": 5}


def test_citations_over_one_span_and_over_the_whole_answer() -> None:
    both = [{**ANNOTATIONS[0], "start_index": 35, "end_index": 57}, ANNOTATIONS[1]]
    blocks = text_blocks(ANSWER, both, {})
    assert [block["text"] for block in blocks] == ["In fog the keeper sounds the horn. ", "High water is at 06:12", "."]
    assert [citation["url"] for citation in blocks[1]["citations"]] == [FOG, TIDES]
    assert blocks[1]["citations"][0]["cited_text"] == "High water is at 06:12"  # a page not read: the span itself
    whole = text_blocks(ANSWER, [{**ANNOTATIONS[0], "start_index": 0, "end_index": len(ANSWER)}], {})
    assert [block["text"] for block in whole] == [ANSWER] and len(whole[0]["citations"]) == 1
    assert text_blocks(ANSWER, [], {}) == [{"type": "text", "text": ANSWER}]


def test_a_failed_search_and_page_reads() -> None:
    page = {"id": "ws_page", "type": "web_search_call", "status": "completed",
            "action": {"type": "open_page", "url": FOG, "title": "Fog signals", "text": "The keeper sounds the horn in fog."}}
    cited = [{**ANNOTATIONS[0], "start_index": 0, "end_index": 10}]
    result = translated(response(search("ws_x", status="failed"), page, message("The horn.", cited)))
    assert result["content"][:2] == [
        {"type": "server_tool_use", "id": "srvtoolu_x", "name": "web_search", "input": {"query": "fog horn"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_x", "content": {"type": "web_search_tool_result_error",
                                                                                      "error_code": "unavailable"}}]
    assert result["content"][2]["citations"][0]["cited_text"] == "The keeper sounds the horn in fog."  # from the page read
    assert len(result["content"]) == 3  # the page read itself is not shown: Anthropic's web search reads no pages
    assert result["usage"]["server_tool_use"]["web_search_requests"] == 1


def test_mcp_calls_and_their_results_and_no_listing() -> None:
    listing = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "demo", "tools": [], "error": None}
    ok = {"id": "mcp_abc", "type": "mcp_call", "server_label": "demo", "name": "echo", "arguments": '{"text": "hi"}', "output": "echo: hi",
          "error": None, "status": "completed"}
    failed = {"id": "mcp_def", "type": "mcp_call", "server_label": "demo", "name": "fail", "arguments": "{}", "output": None,
              "error": {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "It broke."}]}, "status": "failed"}
    unreachable = {**failed, "id": "mcp_ghi", "error": {"type": "http_error", "code": 424, "message": "The server could not be reached."}}
    result = translated(response(listing, ok, failed, unreachable, message("Tool result: echo: hi")), beta=True, web_search=False)
    assert result["content"] == [
        {"type": "mcp_tool_use", "id": "mcptoolu_abc", "name": "echo", "server_name": "demo", "input": {"text": "hi"}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_abc", "is_error": False, "content": [{"type": "text", "text": "echo: hi"}]},
        {"type": "mcp_tool_use", "id": "mcptoolu_def", "name": "fail", "server_name": "demo", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_def", "is_error": True, "content": [{"type": "text", "text": "It broke."}]},
        {"type": "mcp_tool_use", "id": "mcptoolu_ghi", "name": "fail", "server_name": "demo", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_ghi", "is_error": True,
         "content": [{"type": "text", "text": "The server could not be reached."}]},
        {"type": "text", "text": "Tool result: echo: hi"}]
    assert "server_tool_use" not in result["usage"]


def test_thinking_and_a_client_tool_call() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "They want Paris."}]}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_a1", "name": "get_weather", "arguments": '{"city": "Paris"}',
            "status": "completed"}
    result = translated(response(reasoning, message("Checking."), call), web_search=False)
    assert result["content"] == [
        {"type": "thinking", "thinking": "They want Paris.", "signature": "signed(They want Paris.)"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_a1", "name": "get_weather", "input": {"city": "Paris"}}]
    assert result["stop_reason"] == "tool_use"


def test_how_a_response_ends() -> None:
    assert translated(response(message("Cut"), status="incomplete", reason="max_output_tokens"))["stop_reason"] == "max_tokens"
    # The tool loop's turns spent: Anthropic's pause_turn, which a client answers by sending the turn back.
    assert translated(response(search(), status="incomplete", reason="max_messages"))["stop_reason"] == "pause_turn"
    refusal = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "refusal", "refusal": "I can't help with that."}]}
    refused = translated(response(refusal))
    assert refused["stop_reason"] == "refusal" and refused["content"] == [{"type": "text", "text": "I can't help with that."}]
    assert refused["stop_details"] == {"type": "refusal", "category": None, "explanation": None}
