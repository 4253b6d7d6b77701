"""A Messages request's messages in, Responses input items out: golden pairs for each rule of
`providers/messages/input_items.py`, every list of items one the Responses API takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.items import normalize_input
from providers.messages.checks import check_request
from providers.messages.input_items import input_items

PAGE = {"url": "https://tides.example.org/harbour", "title": "Tides", "text": "High water at 06:12."}


def opened(token: str) -> Mapping[str, Any] | None:
    return PAGE if token == "sealed-tides" else None


def items(messages: list[dict[str, Any]], reveal: Any = None) -> tuple[list[dict[str, Any]], list[int]]:
    check_request({"model": "m", "max_tokens": 16, "messages": messages})
    made, origins = input_items(messages, reveal=reveal, open_result=opened)
    normalize_input(made)  # the Responses API's own checks of input items
    return made, origins


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}


def test_turns_of_one_role_are_merged_and_each_item_knows_its_message() -> None:
    made, origins = items([{"role": "user", "content": "Hi"}, {"role": "user", "content": [{"type": "text", "text": "there"}]},
                           {"role": "assistant", "content": "Hello"}, {"role": "system", "content": "Now in French."},
                           {"role": "user", "content": "Merci"}])
    assert made == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}, {"type": "input_text", "text": "there"}]},
                    assistant("Hello"), {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Now in French."}]},
                    user("Merci")]
    assert origins == [0, 2, 3, 4]


def test_a_users_images_and_documents() -> None:
    made, _ = items([{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file-1"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}, "title": "a.pdf"},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/b.pdf"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain"}},
        {"type": "search_result", "source": "https://example.com", "title": "T", "content": [{"type": "text", "text": "x"}]}]}])
    assert made[0]["content"] == [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {"type": "input_file", "file_id": "file-1"},
        {"type": "input_text", "text": "[Document: a.pdf]"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
        {"type": "input_file", "file_url": "https://example.com/b.pdf", "filename": "b.pdf"},
        {"type": "input_text", "text": "plain"},
        {"type": "input_text", "text": "[Search result: T]\nSource: https://example.com\nx"}]


def test_client_tool_uses_and_results_are_function_calls_and_outputs() -> None:
    made, origins = items([
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Two cities.", "signature": "s"},
                                          {"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True, "content": [{"type": "text", "text": "no data"}]},
            {"type": "text", "text": "And?"}]}])
    assert made[1:] == [
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Two cities."}]},
        assistant("Checking."),
        {"type": "function_call", "call_id": "toolu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "toolu_2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "toolu_2", "output": "Error: no data"},
        user("And?")]
    assert origins == [0, 1, 1, 1, 1, 2, 2, 2]


def test_a_result_with_an_image_is_given_as_parts() -> None:
    made, _ = items([{"role": "user", "content": "Look"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}]}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": [
                {"type": "text", "text": "blurred"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}}]}]}])
    assert made[-1] == {"type": "function_call_output", "call_id": "toolu_1", "output": [
        {"type": "input_text", "text": "Error: "}, {"type": "input_text", "text": "blurred"},
        {"type": "input_image", "image_url": "https://example.com/s.png", "detail": "auto"}]}


def test_mcp_blocks_handed_back_are_mcp_calls() -> None:
    made, _ = items([{"role": "user", "content": "Echo"}, {"role": "assistant", "content": [
        {"type": "mcp_tool_use", "id": "mcptoolu_abc", "name": "echo", "server_name": "demo", "input": {"text": "hi"}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_abc", "is_error": False, "content": [{"type": "text", "text": "echo: hi"}]},
        {"type": "mcp_tool_use", "id": "mcptoolu_def", "name": "fail", "server_name": "demo", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_def", "is_error": True, "content": "boom"},
        {"type": "mcp_tool_use", "id": "toolu_other", "name": "echo", "server_name": "demo", "input": {}},
        {"type": "text", "text": "Done."}]}])
    assert made[1:] == [
        {"type": "mcp_call", "id": "mcp_abc", "server_label": "demo", "name": "echo", "arguments": '{"text": "hi"}', "output": "echo: hi",
         "error": None, "status": "completed"},
        {"type": "mcp_call", "id": "mcp_def", "server_label": "demo", "name": "fail", "arguments": "{}", "output": None, "error": "boom",
         "status": "failed"},
        {"type": "mcp_call", "id": "mcp_toolu_other", "server_label": "demo", "name": "echo", "arguments": "{}", "output": None,
         "error": None, "status": "incomplete"},  # its result is not in the turn
        assistant("Done.")]


def test_web_search_blocks_handed_back_are_web_search_calls_with_the_pages_read_again() -> None:
    results = [{"type": "web_search_result", "url": PAGE["url"], "title": "Tides", "encrypted_content": "sealed-tides", "page_age": None},
               {"type": "web_search_result", "url": "https://other.example.com", "title": "Other", "encrypted_content": "not ours"}]
    made, _ = items([{"role": "user", "content": "Tides?"}, {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "tides"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": results},
        {"type": "text", "text": "High water is at 06:12", "citations": [{"type": "web_search_result_location", "url": PAGE["url"],
                                                                        "title": "Tides", "encrypted_index": "x", "cited_text": "c"}]},
        {"type": "text", "text": "."},
        {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_search", "input": {"query": "again"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_2", "content": {"type": "web_search_tool_result_error",
                                                                                      "error_code": "unavailable"}},
        {"type": "server_tool_use", "id": "srvtoolu_3", "name": "code_execution", "input": {"code": "1+1"}}]}])
    assert made[1:] == [
        assistant("Let me look."),
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "tides", "queries": ["tides"], "sources": [
            {"type": "url", "url": PAGE["url"], "title": "Tides", "text": "High water at 06:12."},
            {"type": "url", "url": "https://other.example.com", "title": "Other", "text": ""}]}},
        assistant("High water is at 06:12."),  # the blocks a cited answer was split into, joined again
        {"type": "web_search_call", "id": "ws_2", "status": "failed", "action": {"type": "search", "query": "again", "queries": ["again"],
                                                                                  "sources": None}},
        assistant('\n(Called the server tool code_execution with {"code": "1+1"}.)\n')]


def test_redacted_thinking_is_read_when_it_can_be() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "sealed"},
                                                                                      {"type": "text", "text": "Hello"}]}]
    assert items(messages, reveal=lambda data: "Hmm.")[0][1]["content"] == [{"type": "reasoning_text", "text": "Hmm."}]
    assert items(messages, reveal=lambda data: None)[0][1:] == [assistant("Hello")]
