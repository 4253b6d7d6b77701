"""A Messages request with server tools in, a Responses request out: golden pairs for each rule of
`providers/messages/server_tools.py`, and the responses provider's refusals named in the Messages
request's terms."""

from __future__ import annotations

from typing import Any

import pytest

from contract.errors import FailedDependencyError, InvalidRequestError
from providers.messages.checks import check_request
from providers.messages.server_tools import Translated, in_messages_terms, response_request, server_tools_field, uses_server_tools

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
SEARCH = {"type": "web_search_20250305", "name": "web_search"}
DOCS = {"type": "url", "url": "https://mcp.example.com/mcp", "name": "docs"}


def body(**fields: Any) -> dict[str, Any]:
    request = {"model": "claude-sonnet", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}], **fields}
    check_request(request)  # every golden request is one Anthropic accepts
    return request


def translated(stream: bool = False, **fields: Any) -> Translated:
    return response_request(body(**fields), stream=stream, reveal=None, open_result=lambda token: None)


def sent(**fields: Any) -> dict[str, Any]:
    """The Responses request's fields that were set."""
    request = translated(**fields).request
    request.check()  # the responses provider's own checks pass
    return request.model_dump(exclude_unset=True)


def test_which_requests_go_through_responses() -> None:
    assert not uses_server_tools(body(tools=[WEATHER]))
    assert uses_server_tools(body(mcp_servers=[DOCS]))
    assert uses_server_tools(body(tools=[WEATHER, {**SEARCH, "type": "web_search_20260209"}]))
    handed_back = [{"role": "user", "content": "Find it"}, {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}, {"type": "text", "text": "Found."}]},
        {"role": "user", "content": "Thanks"}]
    assert uses_server_tools(body(messages=handed_back))
    assert server_tools_field(body(messages=handed_back)) == "messages.1.content.0"
    assert uses_server_tools({"messages": "not even a list", "mcp_servers": "x"})  # read before the checks: any shape
    assert not uses_server_tools({"messages": [{"role": "assistant", "content": [7]}], "tools": "x"})


def test_the_simplest_request() -> None:
    assert sent(mcp_servers=[DOCS]) == {
        "model": "claude-sonnet", "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "store": False, "stream": False, "max_output_tokens": 1024,
        "tools": [{"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com/mcp", "require_approval": "never"}]}


def test_mcp_servers_with_their_token_and_allowed_tools_and_a_disabled_one_left_out() -> None:
    servers = [{**DOCS, "authorization_token": "tok", "tool_configuration": {"allowed_tools": ["search"], "enabled": True}},
               {**DOCS, "name": "off", "tool_configuration": {"enabled": False}},
               {**DOCS, "name": "all", "authorization_token": None, "tool_configuration": None}]
    result = translated(mcp_servers=servers)
    assert result.request.tools == [
        {"type": "mcp", "server_label": "docs", "server_url": DOCS["url"], "require_approval": "never", "authorization": "tok",
         "allowed_tools": ["search"]},
        {"type": "mcp", "server_label": "all", "server_url": DOCS["url"], "require_approval": "never"}]
    assert result.tools == (("mcp", "mcp_servers.0"), ("mcp", "mcp_servers.2")) and not result.web_search


def test_the_web_search_tool_and_custom_tools() -> None:
    search = {**SEARCH, "max_uses": 2, "allowed_domains": ["example.org"], "cache_control": {"type": "ephemeral"},
              "user_location": {"type": "approximate", "country": "GB", "city": "Bristol", "region": None}}
    fields = sent(tools=[{**WEATHER, "strict": True}, search, {"type": "bash_20250124", "name": "bash"}])
    assert fields["tools"] == [
        {"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"], "description": "The weather in a city",
         "strict": True},
        {"type": "web_search", "filters": {"allowed_domains": ["example.org"]},
         "user_location": {"type": "approximate", "country": "GB", "city": "Bristol"}}]  # Anthropic's other tools: the caller's
    assert fields["max_tool_calls"] == 2 and fields["include"] == ["web_search_call.action.sources"]
    assert translated(tools=[WEATHER, search]).tools == (("function", "tools.0"), ("web_search", "tools.1"))


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any", "disable_parallel_tool_use": True}, {"tool_choice": "required", "parallel_tool_calls": False}),
    ({"type": "none"}, {"tool_choice": "none"}),
    ({"type": "tool", "name": "get_weather"}, {"tool_choice": {"type": "function", "name": "get_weather"}}),
    ({"type": "tool", "name": "web_search"}, {"tool_choice": {"type": "web_search"}}),
])
def test_tool_choice(choice: dict[str, Any], expected: dict[str, Any]) -> None:
    fields = sent(tools=[WEATHER, SEARCH], tool_choice=choice)
    assert {key: fields[key] for key in ("tool_choice", "parallel_tool_calls") if key in fields} == expected


def test_the_scalar_parameters() -> None:
    fields = sent(stream=True, mcp_servers=[DOCS], system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use French."}],
                  max_tokens=8, temperature=0.2, top_p=0.9, top_k=40, metadata={"user_id": "u-7"}, service_tier="auto",
                  thinking={"type": "adaptive"}, output_config={"format": {"type": "json_schema", "schema": {
                      "type": "object"}}})
    assert {key: value for key, value in fields.items() if key not in ("input", "tools", "model")} == {
        "instructions": "Be brief.\n\nUse French.", "store": False, "stream": True, "temperature": 0.2, "top_p": 0.9, "user": "u-7",
        "reasoning": {"effort": "medium"}, "text": {"format": {"type": "json_schema", "name": "output", "schema": {"type": "object"}}},
        "max_output_tokens": 8}  # under OpenAI's minimum of 16: the client's cap, kept


def test_stop_sequences_and_blocked_domains_are_refused_not_dropped() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        translated(mcp_servers=[DOCS], stop_sequences=["END"])
    assert refused.value.param == "stop_sequences"
    with pytest.raises(InvalidRequestError) as refused:
        translated(tools=[WEATHER, {**SEARCH, "blocked_domains": ["example.com"]}])
    assert refused.value.param == "tools.1.blocked_domains" and refused.value.message.startswith("tools.1.blocked_domains: ")


@pytest.mark.parametrize(("param", "message", "named"), [
    ("tools[1].server_url", "Invalid 'tools[1].server_url': '10.0.0.1' is a private or reserved address.",
     "mcp_servers.1.url: '10.0.0.1' is a private or reserved address."),
    ("tools[1].allowed_tools", "Invalid type for 'tools[1].allowed_tools': expected a list of tool names.",
     "mcp_servers.1.tool_configuration.allowed_tools: expected a list of tool names."),
    ("tools[0].filters.allowed_domains", "Invalid 'tools[0].filters.allowed_domains': expected up to 100 domain names.",
     "tools.1.allowed_domains: expected up to 100 domain names."),
    ("tools[0].user_location.country", "Invalid 'tools[0].user_location.country': expected a two-letter ISO country code.",
     "tools.1.user_location.country: expected a two-letter ISO country code."),
    ("input[2].content[0].image_url", "Invalid 'input[2].content[0].image_url': the image is empty.", "messages.2: the image is empty."),
    ("max_output_tokens", "Invalid 'max_output_tokens': too many.", "max_tokens: too many."),
    ("tool_choice", "Tool 'tool_choice' is odd", "Tool 'tool_choice' is odd"),
])
def test_a_refusal_names_the_messages_field(param: str, message: str, named: str) -> None:
    request = body(tools=[WEATHER, SEARCH], mcp_servers=[{**DOCS, "name": "a"}, {**DOCS, "name": "b"}], messages=[
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Look"}])
    result = response_request({**request, "tools": [SEARCH, WEATHER]}, stream=False, reveal=None, open_result=lambda token: None)
    result = Translated(result.request, result.web_search, (("web_search", "tools.1"), ("mcp", "mcp_servers.1")), result.origins)
    renamed = in_messages_terms(InvalidRequestError(message, param=param, code="invalid_value"), result)
    assert isinstance(renamed, InvalidRequestError) and renamed.status == 400 and renamed.code == "invalid_value"
    assert renamed.message == named


def test_a_424_stays_a_424() -> None:
    result = translated(mcp_servers=[DOCS])
    error = FailedDependencyError("Error retrieving tool list from MCP server: 'docs'.", param="tools[0]")
    renamed = in_messages_terms(error, result)
    assert isinstance(renamed, FailedDependencyError) and renamed.status == 424 and renamed.param == "mcp_servers.0"
    assert in_messages_terms(error, result) is not error and error.param == "tools[0]"


@pytest.mark.parametrize("kind", [["web_search_20250305"], {"type": "x"}, None, 5])
def test_a_type_of_any_shape_is_read_before_the_checks_not_a_500(kind: object) -> None:
    """Found by mutating valid requests: `uses_server_tools` reads the body before it is checked."""
    body = {"model": "m", "max_tokens": 16, "tools": [{"type": kind, "name": "t"}],
            "messages": [{"role": "assistant", "content": [{"type": kind}]}, {"role": "user", "content": "hi"}]}
    assert uses_server_tools(body) is False
