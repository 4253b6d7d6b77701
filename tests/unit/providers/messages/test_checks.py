"""What a Messages request may hold, as a specification: what passes, and each refusal worded as
Anthropic words it, with the field it names as `param`."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from anthropic.types import message_create_params

from contract.errors import InvalidRequestError
from providers.messages.checks import check_request

WEATHER = {"name": "get_weather", "description": "The weather in a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 2048, "messages": [{"role": "user", "content": "Hello"}], **fields}


def tool_turns() -> list[dict[str, Any]]:
    """A user asks, the assistant calls two tools, the user answers both and asks on."""
    return [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "21C"}], "is_error": False},
            {"type": "text", "text": "And tomorrow?"}]},
    ]


MCP = {"type": "url", "url": "https://mcp.example.com/mcp", "name": "docs"}
SEARCH = {"type": "web_search_20250305", "name": "web_search"}


def refusal(body: dict[str, Any]) -> tuple[str, str | None]:
    with pytest.raises(InvalidRequestError) as caught:
        check_request(body)
    assert caught.value.status == 400
    return caught.value.message, caught.value.param


def test_a_request_using_every_feature_passes() -> None:
    body = request(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        messages=[*tool_turns()[:2], {**tool_turns()[2], "content": [
            *tool_turns()[2]["content"],
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}, "title": "a.pdf"},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}, "context": "ctx"},
            {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "inner"}]}},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
            {"type": "document", "source": {"type": "file", "file_id": "file-1"}},
            {"type": "search_result", "source": "https://example.com", "title": "T", "content": [{"type": "text", "text": "x"}]},
        ]}, {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": "sig"}, {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Sunny."}]}, {"role": "system", "content": "Now in French."},
            {"role": "user", "content": "Merci"}],
        tools=[WEATHER, {"type": "custom", **WEATHER, "name": "other"}, {"type": "web_search_20250305", "name": "web_search"}],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 1024}, metadata={"user_id": "u-1"}, stop_sequences=["END"],
        temperature=0.5, top_p=0.9, top_k=40, stream=True, service_tier="standard_only",
        output_config={"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}},
        context_management={"edits": []})
    check_request(body)


def test_every_field_of_the_sdks_message_create_params_is_accepted() -> None:
    samples = {
        "model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "cache_control": {"type": "ephemeral"},
        "container": "container_1", "diagnostics": {"previous_message_id": None}, "inference_geo": "us", "metadata": {"user_id": None},
        "output_config": {"effort": "low"}, "service_tier": "auto", "speed": "fast", "stop_sequences": [], "stream": False,
        "system": "Be brief.", "thinking": {"type": "adaptive", "display": "summarized"}, "tool_choice": {"type": "none"},
        "tools": [WEATHER], "user_profile_id": "up_1", "workspace_id": "wrkspc_1",
    }
    params = message_create_params.MessageCreateParamsStreaming
    assert set(samples) == params.__required_keys__ | params.__optional_keys__  # a field the SDK adds fails here first
    check_request(samples)


def test_server_tools_and_their_blocks_pass() -> None:
    search = {**SEARCH, "max_uses": 2, "allowed_domains": ["example.org"], "blocked_domains": None, "cache_control": {"type": "ephemeral"},
              "user_location": {"type": "approximate", "city": "Bristol", "country": "GB", "region": None, "timezone": "Europe/London"},
              "allowed_callers": ["direct"], "defer_loading": False, "strict": True}
    check_request(request(
        tools=[search], mcp_servers=[{**MCP, "authorization_token": "tok", "tool_configuration": {"allowed_tools": ["a"], "enabled": True}},
                                     {**MCP, "name": "other", "authorization_token": None, "tool_configuration": None}],
        messages=[{"role": "user", "content": "Find it"}, {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}, "cache_control": None},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "url": "https://example.org", "title": "T", "encrypted_content": "e", "page_age": None}]},
            {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_2", "content": {"type": "web_search_tool_result_error",
                                                                                          "error_code": "unavailable"}},
            {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "docs", "input": {"text": "hi"}},
            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False, "content": [{"type": "text", "text": "hi"}]},
            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": "hi"},
            {"type": "text", "text": "Found", "citations": [{"type": "web_search_result_location", "url": "https://example.org",
                                                             "title": "T", "encrypted_index": "i", "cited_text": "c"}]}]},
                  {"role": "user", "content": "Thanks"}]))
    for kind in ("web_search_20260209", "web_search_20260318"):
        check_request(request(tools=[{**SEARCH, "type": kind}]))
    check_request(request(tools=[{**SEARCH, "type": "web_search_20260318", "response_inclusion": "full"}]))


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # merged by Anthropic, not refused
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "Go on"}],
    [{"role": "user", "content": "Complete:"}, {"role": "assistant", "content": []}],  # the final assistant turn may be empty
    [{"role": "user", "content": ""}],  # an empty string passes, as it does at Anthropic
    tool_turns()[:2],  # a tool use with no next message yet
    [*tool_turns()[:2], {"role": "user", "content": [tool_turns()[2]["content"][0]]},
     {"role": "user", "content": [tool_turns()[2]["content"][1]]}],  # the results split across one merged turn
], ids=["consecutive-users", "assistant-first", "empty-final-assistant", "empty-string", "unanswered-last", "merged-results"])
def test_turns_anthropic_accepts(messages: list[dict[str, Any]]) -> None:
    check_request(request(messages=messages))


def without(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda body: body.pop(key)


def setting(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda body: body.update(fields)


def in_turns(edit: Callable[[list[dict[str, Any]]], None]) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        body["messages"] = tool_turns()
        edit(body["messages"])
    return change


USER_TAGS = "'text', 'image', 'document', 'search_result', 'tool_result'"

REFUSALS: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("model", without("model"), "model: Field required", "model"),
    ("max_tokens", without("max_tokens"), "max_tokens: Field required", "max_tokens"),
    ("max_tokens-zero", setting(max_tokens=0), "max_tokens: Input should be greater than or equal to 1", "max_tokens"),
    ("max_tokens-string", setting(max_tokens="10"), "max_tokens: Input should be a valid integer", "max_tokens"),
    ("max_tokens-bool", setting(max_tokens=True), "max_tokens: Input should be a valid integer", "max_tokens"),
    ("messages", without("messages"), "messages: Field required", "messages"),
    ("messages-empty", setting(messages=[]), "messages: at least one message is required", "messages"),
    ("messages-object", setting(messages={"role": "user"}), "messages: Input should be a valid list", "messages"),
    ("role", setting(messages=[{"role": "bot", "content": "x"}]),
     "messages.0.role: Input should be 'user', 'assistant' or 'system'", "messages.0.role"),
    ("role-missing", setting(messages=[{"content": "x"}]), "messages.0.role: Field required", "messages.0.role"),
    ("content-missing", setting(messages=[{"role": "user"}]), "messages.0.content: Field required", "messages.0.content"),
    ("message-extra", setting(messages=[{"role": "user", "content": "x", "name": "bob"}]),
     "messages.0.name: Extra inputs are not permitted", "messages.0.name"),
    ("content-empty", setting(messages=[{"role": "user", "content": []}, {"role": "assistant", "content": "x"}]),
     "messages.0: all messages must have non-empty content except for the optional final assistant message", "messages.0"),
    ("tool_use_id", in_turns(lambda m: m[2]["content"][1].pop("tool_use_id")),
     "messages.2.content.1.tool_result.tool_use_id: Field required", "messages.2.content.1.tool_use_id"),
    ("tool_use-extra", in_turns(lambda m: m[1]["content"][1].update(text="x")),
     "messages.1.content.1.tool_use.text: Extra inputs are not permitted", "messages.1.content.1.text"),
    ("tool_use-input", in_turns(lambda m: m[1]["content"][1].update(input="{}")),
     "messages.1.content.1.tool_use.input: Input should be a valid dictionary", "messages.1.content.1.input"),
    ("block-tag", setting(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]),
     f"messages.0.content.0: Input tag 'video' found using 'type' does not match any of the expected tags: {USER_TAGS}",
     "messages.0.content.0"),
    ("assistant-block-tag", in_turns(lambda m: m[1]["content"].append({"type": "tool_result", "tool_use_id": "toolu_1"})),
     "messages.1.content.3: Input tag 'tool_result' found using 'type' does not match any of the expected tags: 'text', 'thinking', "
     "'redacted_thinking', 'tool_use', 'server_tool_use', 'web_search_tool_result', 'mcp_tool_use', 'mcp_tool_result'",
     "messages.1.content.3"),
    ("block-untagged", setting(messages=[{"role": "user", "content": [{"text": "x"}]}]),
     "messages.0.content.0: Unable to extract tag using discriminator 'type'", "messages.0.content.0"),
    ("image-media-type", setting(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "x"}}]}]),
     "messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
     "messages.0.content.0.source.media_type"),
    ("text-empty", setting(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
     "messages.0.content.0: text content blocks must be non-empty", "messages.0.content.0.text"),
    ("text-whitespace", setting(messages=[{"role": "user", "content": [{"type": "text", "text": " \n"}]}]),
     "messages.0.content.0: text content blocks must contain non-whitespace text", "messages.0.content.0.text"),
    ("system-whitespace", setting(system="  "), "system: text content blocks must contain non-whitespace text", "system"),
    ("system-block", setting(system=[{"type": "image", "text": "x"}]), "system.0.type: Input should be 'text'", "system.0.type"),
    ("unexpected-result", in_turns(lambda m: m[2]["content"].insert(1, {"type": "tool_result", "tool_use_id": "toolu_9"})),
     "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. Each `tool_result` block must have a "
     "corresponding `tool_use` block in the previous message.", "messages.2.content.1"),
    ("result-first", setting(messages=[tool_turns()[2]]),
     "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. Each `tool_result` block must have a "
     "corresponding `tool_use` block in the previous message.", "messages.0.content.0"),
    ("unanswered-uses", in_turns(lambda m: m[2].update(content="Never mind")),
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1, toolu_2. Each `tool_use` block "
     "must have a corresponding `tool_result` block in the next message.", "messages.1"),
    ("error-empty", in_turns(lambda m: m[2]["content"][0].update(content="", is_error=True)),
     "messages.2.content.0.tool_result: content cannot be empty if is_error is true", "messages.2.content.0"),
    ("temperature", setting(temperature=1.5), "temperature: Input should be less than or equal to 1", "temperature"),
    ("temperature-type", setting(temperature="hot"), "temperature: Input should be a valid number", "temperature"),
    ("top_p", setting(top_p=-0.1), "top_p: Input should be greater than or equal to 0", "top_p"),
    ("top_k", setting(top_k=-1), "top_k: Input should be greater than or equal to 0", "top_k"),
    ("top_k-float", setting(top_k=2.5), "top_k: Input should be a valid integer", "top_k"),
    ("stop_sequences", setting(stop_sequences=["END", 3]), "stop_sequences.1: Input should be a valid string", "stop_sequences.1"),
    ("stop_sequences-string", setting(stop_sequences="END"), "stop_sequences: Input should be a valid list", "stop_sequences"),
    ("stream", setting(stream="yes"), "stream: Input should be a valid boolean", "stream"),
    ("tool-name-pattern", setting(tools=[{**WEATHER, "name": "weather.get"}]),
     "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", "tools.0.name"),
    ("tool-name-long", setting(tools=[{**WEATHER, "name": "x" * 129}]),
     "tools.0.custom.name: String should have at most 128 characters", "tools.0.name"),
    ("tool-name-missing", setting(tools=[{"input_schema": {"type": "object"}}]), "tools.0.custom.name: Field required", "tools.0.name"),
    ("tool-names-unique", setting(tools=[WEATHER, WEATHER]), "tools: Tool names must be unique.", "tools"),
    ("tool-schema-missing", setting(tools=[{"name": "a"}]), "tools.0.custom.input_schema: Field required", "tools.0.input_schema"),
    ("tool-schema-type", setting(tools=[{"name": "a", "input_schema": {"type": "array"}}]),
     "tools.0.custom.input_schema.type: Input should be 'object'", "tools.0.input_schema.type"),
    ("tool-schema-untyped", setting(tools=[{"name": "a", "input_schema": {"properties": {}}}]),
     "tools.0.custom.input_schema.type: Field required", "tools.0.input_schema.type"),
    ("tool-schema-anyOf", setting(tools=[{"name": "a", "input_schema": {"type": "object", "anyOf": []}}]),
     "tools.0.custom.input_schema: input_schema does not support oneOf, allOf, or anyOf at the top level", "tools.0.input_schema"),
    ("tool-type", setting(tools=[{**WEATHER, "type": "function"}]),
     "tools.0: Input tag 'function' found using 'type' does not match any of the expected tags: 'custom', 'bash_20250124'",
     "tools.0"),
    ("tool-extra", setting(tools=[{**WEATHER, "parameters": {}}]), "tools.0.custom.parameters: Extra inputs are not permitted",
     "tools.0.parameters"),
    ("tool_choice-type", setting(tool_choice={"type": "required"}),
     "tool_choice: Input tag 'required' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'",
     "tool_choice"),
    ("tool_choice-name", setting(tools=[WEATHER], tool_choice={"type": "tool"}), "tool_choice.tool.name: Field required",
     "tool_choice.name"),
    ("tool_choice-unknown", setting(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_time"}),
     "tool_choice.tool.name: Tool 'get_time' not found in tools", "tool_choice.name"),
    ("tool_choice-parallel", setting(tool_choice={"type": "any", "disable_parallel_tool_use": "yes"}),
     "tool_choice.any.disable_parallel_tool_use: Input should be a valid boolean", "tool_choice.disable_parallel_tool_use"),
    ("tool_choice-none-extra", setting(tool_choice={"type": "none", "disable_parallel_tool_use": True}),
     "tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted", "tool_choice.disable_parallel_tool_use"),
    ("thinking-budget", setting(thinking={"type": "enabled", "budget_tokens": 512}),
     "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024", "thinking.budget_tokens"),
    ("thinking-budget-missing", setting(thinking={"type": "enabled"}), "thinking.enabled.budget_tokens: Field required",
     "thinking.budget_tokens"),
    ("thinking-over-max", setting(thinking={"type": "enabled", "budget_tokens": 2048}),
     "`max_tokens` must be greater than `thinking.budget_tokens`.", "thinking.budget_tokens"),
    ("thinking-type", setting(thinking={"type": "on"}),
     "thinking: Input tag 'on' found using 'type' does not match any of the expected tags: 'enabled', 'disabled', 'adaptive', "
     "'between_tools'", "thinking"),
    ("metadata-user", setting(metadata={"user_id": 7}), "metadata.user_id: Input should be a valid string", "metadata.user_id"),
    ("metadata-extra", setting(metadata={"session": "s"}), "metadata.session: Extra inputs are not permitted", "metadata.session"),
    ("service_tier", setting(service_tier="priority"), "service_tier: Input should be 'auto' or 'standard_only'", "service_tier"),
    ("extra", setting(response_format={"type": "json_object"}), "response_format: Extra inputs are not permitted", "response_format"),
    ("mcp-url", setting(mcp_servers=[{"type": "url", "name": "docs"}]), "mcp_servers.0.url: Field required", "mcp_servers.0.url"),
    ("mcp-type", setting(mcp_servers=[{**MCP, "type": "stdio"}]), "mcp_servers.0.type: Input should be 'url'", "mcp_servers.0.type"),
    ("mcp-extra", setting(mcp_servers=[{**MCP, "headers": {}}]), "mcp_servers.0.headers: Extra inputs are not permitted",
     "mcp_servers.0.headers"),
    ("mcp-allowed", setting(mcp_servers=[{**MCP, "tool_configuration": {"allowed_tools": "search"}}]),
     "mcp_servers.0.tool_configuration.allowed_tools: Input should be a valid list", "mcp_servers.0.tool_configuration.allowed_tools"),
    ("mcp-names", setting(mcp_servers=[MCP, MCP]), "mcp_servers: MCP server names must be unique.", "mcp_servers"),
    ("web-search-name", setting(tools=[{**SEARCH, "name": "search"}]),
     "tools.0.web_search_20250305.name: Input should be 'web_search'", "tools.0.name"),
    ("web-search-max-uses", setting(tools=[{**SEARCH, "max_uses": 0}]),
     "tools.0.web_search_20250305.max_uses: Input should be greater than or equal to 1", "tools.0.max_uses"),
    ("web-search-location", setting(tools=[{**SEARCH, "user_location": {"type": "exact"}}]),
     "tools.0.web_search_20250305.user_location.type: Input should be 'approximate'", "tools.0.user_location.type"),
    ("web-search-extra", setting(tools=[{**SEARCH, "filters": {}}]),
     "tools.0.web_search_20250305.filters: Extra inputs are not permitted", "tools.0.filters"),
    ("server-tool-name", in_turns(lambda m: m[1]["content"].append({"type": "server_tool_use", "id": "s", "name": "x", "input": {}})),
     "messages.1.content.3.server_tool_use.name: Input should be 'web_search', 'web_fetch', 'code_execution', 'bash_code_execution', "
     "'text_editor_code_execution', 'tool_search_tool_regex' or 'tool_search_tool_bm25'", "messages.1.content.3.name"),
    ("web-result-error", in_turns(lambda m: m[1]["content"].append({"type": "web_search_tool_result", "tool_use_id": "s", "content": {
        "type": "web_search_tool_result_error", "error_code": "broken"}})),
     "messages.1.content.3.web_search_tool_result.content.error_code: Input should be 'invalid_tool_input', 'unavailable', "
     "'max_uses_exceeded', 'too_many_requests', 'query_too_long' or 'request_too_large'", "messages.1.content.3.content.error_code"),
    ("web-result-url", in_turns(lambda m: m[1]["content"].append({"type": "web_search_tool_result", "tool_use_id": "s", "content": [
        {"type": "web_search_result", "title": "t", "encrypted_content": "e"}]})),
     "messages.1.content.3.web_search_tool_result.content.0.url: Field required", "messages.1.content.3.content.0.url"),
    ("mcp-use-server", in_turns(lambda m: m[1]["content"].append({"type": "mcp_tool_use", "id": "m", "name": "x", "input": {}})),
     "messages.1.content.3.mcp_tool_use.server_name: Field required", "messages.1.content.3.server_name"),
    ("mcp-result-content", in_turns(lambda m: m[1]["content"].append({"type": "mcp_tool_result", "tool_use_id": "m", "content": [
        {"type": "image"}]})),
     "messages.1.content.3.mcp_tool_result.content.0.text: Field required", "messages.1.content.3.content.0.text"),
]


@pytest.mark.parametrize(("change", "message", "param"), [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_each_mistake_is_refused_as_anthropic_words_it(change: Callable[[dict[str, Any]], None], message: str, param: str) -> None:
    body = copy.deepcopy(request())
    change(body)
    got, got_param = refusal(body)
    if message.endswith("'custom', 'bash_20250124'"):  # the whole list of tool types is long: its head is enough
        assert got.startswith(message)
    else:
        assert got == message
    assert got_param == param
