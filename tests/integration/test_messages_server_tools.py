"""Anthropic's server tools in the Messages API (issue 46, item 1) through the `anthropic` SDK, as a
server and as a library: the MCP connector (`mcp_servers`, the suite's real MCP servers) over the
integration stack, and `web_search_20250305` over a stack with a fake search engine
(tests/fake_search), both answered by the responses provider's tool loop; the model's turns come
from the live fake upstream's directives."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

from fake_mcp.servers import TOKEN, McpServers
from fake_search import FakeSearch, running_fake_search
from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.testing.targets import StackTarget, open_target
from support.live_stack import run_yaml

BETA = ["mcp-client-2025-04-04"]
ECHO = '[tool:echo {"text": "hi"}] echo it'


@pytest.fixture
def claude(live: StackTarget) -> Iterator[anthropic.Anthropic]:
    client = live.anthropic(max_retries=0)
    yield client
    client.close()


def server(url: str, name: str = "demo", **extra: Any) -> Any:
    return {"type": "url", "url": url, "name": name, **extra}


# --- the MCP connector --------------------------------------------------------------------------


def test_an_mcp_call_and_its_result_are_blocks_of_the_answer(claude: anthropic.Anthropic, mcp_servers: McpServers) -> None:
    message = claude.beta.messages.create(model="fake-model", max_tokens=64, betas=BETA, messages=[{"role": "user", "content": ECHO}],
                                          mcp_servers=[server(mcp_servers.open)])
    use, result, text = message.content
    assert use.type == "mcp_tool_use" and (use.name, use.server_name, use.input) == ("echo", "demo", {"text": "hi"})
    assert use.id.startswith("mcptoolu_")
    assert result.type == "mcp_tool_result" and result.tool_use_id == use.id and result.is_error is False
    assert [(block.type, block.text) for block in result.content] == [("text", "echo: hi")]  # type: ignore[union-attr]
    assert text.type == "text" and text.text == "Tool result: echo: hi"
    assert message.stop_reason == "end_turn" and message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_a_streamed_mcp_call_folds_into_the_same_message(claude: anthropic.Anthropic, mcp_servers: McpServers) -> None:
    with claude.beta.messages.stream(model="fake-model", max_tokens=64, betas=BETA, messages=[{"role": "user", "content": ECHO}],
                                     mcp_servers=[server(mcp_servers.open)]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [block.type for block in final.content] == ["mcp_tool_use", "mcp_tool_result", "text"]
    assert final.content[0].input == {"text": "hi"} and final.content[2].text == "Tool result: echo: hi"  # type: ignore[union-attr]


def test_the_token_and_allowed_tools_reach_the_server_and_the_model(claude: anthropic.Anthropic, mcp_servers: McpServers,
                                                                   upstream: FakeUpstream) -> None:
    configured = server(mcp_servers.private, authorization_token=TOKEN, tool_configuration={"allowed_tools": ["echo"]})
    message = claude.beta.messages.create(model="fake-model", max_tokens=64, betas=BETA, messages=[{"role": "user", "content": ECHO}],
                                          mcp_servers=[configured, server(mcp_servers.open, "off", tool_configuration={"enabled": False})])
    assert message.content[1].content[0].text == "echo: hi"  # type: ignore[union-attr]
    offered = [tool["function"]["name"] for tool in upstream.bodies("/v1/chat/completions")[-2]["tools"]]
    assert offered == ["echo"]


def test_a_conversation_hands_the_mcp_blocks_back(claude: anthropic.Anthropic, mcp_servers: McpServers, upstream: FakeUpstream) -> None:
    first = claude.beta.messages.create(model="fake-model", max_tokens=64, betas=BETA, messages=[{"role": "user", "content": ECHO}],
                                        mcp_servers=[server(mcp_servers.open)])
    claude.beta.messages.create(model="fake-model", max_tokens=64, betas=BETA, mcp_servers=[server(mcp_servers.open)], messages=[
        {"role": "user", "content": ECHO}, {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
        {"role": "user", "content": "[tokens:2] and then?"}])
    sent = upstream.bodies("/v1/chat/completions")[-1]["messages"]
    call = next(message for message in sent if message.get("tool_calls"))
    assert call["tool_calls"][0]["function"] == {"name": "echo", "arguments": '{"text": "hi"}'}
    assert {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "echo: hi"} in sent
    assert sent[-1] == {"role": "user", "content": "[tokens:2] and then?"}


def test_a_server_on_a_private_address_is_refused_naming_the_field(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.beta.messages.create(model="fake-model", max_tokens=64, betas=BETA, messages=[{"role": "user", "content": "hi"}],
                                    mcp_servers=[server("http://10.0.0.1/mcp")])
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and error["message"].startswith("mcp_servers.0.url: '10.0.0.1' is a private")


def test_an_unreachable_server_is_a_424_in_anthropics_envelope(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as refused:
        claude.beta.messages.create(model="fake-model", max_tokens=64, betas=BETA, messages=[{"role": "user", "content": "hi"}],
                                    mcp_servers=[server("http://127.0.0.1:9/mcp")])
    assert refused.value.status_code == 424 and "Error retrieving tool list from MCP server: 'demo'" in refused.value.message


def test_without_a_search_engine_web_search_is_a_400_naming_the_tool(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="fake-model", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                               tools=[{"type": "web_search_20250305", "name": "web_search"}])
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("tools.0.type: ") and "tavily, brave or searxng" in message


# --- web search ---------------------------------------------------------------------------------

ANSWER = "In fog the keeper sounds the horn [1]. High water is at 06:12 [2]."
FOG, TIDES = "https://www.lighthouses.example.com/fog", "https://tides.example.org/harbour"
SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}


def ask(query: str, answer: str = ANSWER) -> str:
    return f'[tool:web_search {json.dumps({"query": query})}] [answer {json.dumps({"text": answer})}]'


@dataclass
class Searching:
    claude: anthropic.Anthropic
    search: FakeSearch
    upstream: FakeUpstream


@pytest.fixture(scope="module", params=["server", "library"])
def searching(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Searching]:
    root: Path = tmp_path_factory.mktemp("messages-web")
    with running_fake_search("searxng") as search, running_fake_upstream() as upstream:
        providers = (f"  messages: [{{provider_id: builtin, provider_type: builtin}}]\n"
                     f"  tool_runtime: [{{provider_id: web, provider_type: searxng, config: {{base_url: \"{search.base_url}\", timeout_s: 1}}}}]")
        config = run_yaml(root, upstream.base_url, providers, name="messages-web")
        with open_target(f"{request.param}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            client = target.anthropic(max_retries=0)
            yield Searching(client, search, upstream)
            client.close()


def test_a_search_its_results_and_a_cited_answer(searching: Searching) -> None:
    message = searching.claude.messages.create(model="fake-model", max_tokens=256, tools=[SEARCH],  # type: ignore[list-item]
                                               messages=[{"role": "user", "content": ask("fog horn harbour")}])
    use, results, *texts = message.content
    assert use.type == "server_tool_use" and use.name == "web_search" and use.input == {"query": "fog horn harbour"}
    assert use.id.startswith("srvtoolu_")
    assert results.type == "web_search_tool_result" and results.tool_use_id == use.id
    assert [(result.url, result.title) for result in results.content] == [  # type: ignore[union-attr]
        (FOG, "Fog signals"), (TIDES, "Harbour tide tables")]
    assert all(result.encrypted_content and result.page_age is None for result in results.content)  # type: ignore[union-attr]
    assert [block.text for block in texts] == ["In fog the keeper sounds the horn", ". ", "High water is at 06:12", "."]  # type: ignore[union-attr]
    cited = [(block.text, [(c.type, c.url, c.title) for c in block.citations or ()]) for block in texts]  # type: ignore[union-attr]
    assert cited[0][1] == [("web_search_result_location", FOG, "Fog signals")] and cited[1][1] == []
    assert cited[2][1] == [("web_search_result_location", TIDES, "Harbour tide tables")]
    assert texts[2].citations[0].cited_text == "High water at the harbour is at 06:12 and 18:40 today."  # type: ignore[union-attr,index]
    assert message.usage.server_tool_use is not None and message.usage.server_tool_use.web_search_requests == 1
    assert message.stop_reason == "end_turn"


def test_a_streamed_search_folds_into_the_same_blocks(searching: Searching) -> None:
    with searching.claude.messages.stream(model="fake-model", max_tokens=256, tools=[SEARCH],  # type: ignore[list-item]
                                          messages=[{"role": "user", "content": ask("fog horn harbour")}]) as stream:
        deltas = [event.delta.type for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "citations_delta" in deltas and "input_json_delta" in deltas
    assert [block.type for block in final.content] == ["server_tool_use", "web_search_tool_result", "text", "text", "text", "text"]
    assert final.content[0].input == {"query": "fog horn harbour"}  # type: ignore[union-attr]
    assert [c.url for block in final.content[2:] for c in block.citations or ()] == [FOG, TIDES]  # type: ignore[union-attr]
    assert final.usage.server_tool_use is not None and final.usage.server_tool_use.web_search_requests == 1


def test_results_handed_back_give_the_model_the_pages_again(searching: Searching) -> None:
    first = searching.claude.messages.create(model="fake-model", max_tokens=256, tools=[SEARCH],  # type: ignore[list-item]
                                             messages=[{"role": "user", "content": ask("fog horn harbour")}])
    searching.claude.messages.create(model="fake-model", max_tokens=256, tools=[SEARCH], messages=[  # type: ignore[list-item]
        {"role": "user", "content": ask("fog horn harbour")}, {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
        {"role": "user", "content": "[tokens:2] and then?"}])
    sent = searching.upstream.bodies()[-1]["messages"]
    assert any(m["role"] == "tool" and "twice a minute" in m["content"] for m in sent)  # the page, read again from the sealed result
    assert {"role": "assistant", "content": "In fog the keeper sounds the horn. High water is at 06:12."} in sent


def test_allowed_domains_and_location_reach_the_engine(searching: Searching) -> None:
    tool = {**SEARCH, "allowed_domains": ["example.org"], "user_location": {"type": "approximate", "country": "GB"}}
    message = searching.claude.messages.create(model="fake-model", max_tokens=256, tools=[tool],  # type: ignore[list-item]
                                               messages=[{"role": "user", "content": ask("fog horn harbour", "At 06:12 [1].")}])
    assert [result.url for result in message.content[1].content] == [TIDES]  # type: ignore[union-attr]
    assert searching.search.requests[-1]["params"]["q"] == "fog horn harbour site:example.org"


def test_a_malformed_web_search_tool_is_refused_naming_its_field(searching: Searching) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        searching.claude.messages.create(model="fake-model", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                         tools=[{**SEARCH, "allowed_domains": ["https://example.com/path"]}])  # type: ignore[list-item]
    assert refused.value.body["error"]["message"].startswith("tools.0.allowed_domains: ")  # type: ignore[index]


WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_client_tool_beside_mcp_servers_round_trips(claude: anthropic.Anthropic, mcp_servers: McpServers, upstream: FakeUpstream,
                                                       stream: bool) -> None:
    ask = {"role": "user", "content": '[tool:get_weather {"city": "Paris"}] weather?'}
    options: Any = {"model": "fake-model", "max_tokens": 64, "betas": BETA, "tools": [WEATHER], "mcp_servers": [server(mcp_servers.open)]}
    if stream:
        with claude.beta.messages.stream(**options, messages=[ask]) as events:
            first = events.get_final_message()
    else:
        first = claude.beta.messages.create(**options, messages=[ask])
    assert first.stop_reason == "tool_use" and [block.type for block in first.content] == ["tool_use"]
    use = first.content[0]
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")  # type: ignore[union-attr]
    answer = claude.beta.messages.create(**options, messages=[ask, {"role": "assistant", "content": first.content},
                                                              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                                                            "content": "sunny, 21 C"}]}])
    assert answer.stop_reason == "end_turn" and answer.content[-1].text == "Tool result: sunny, 21 C"  # type: ignore[union-attr]
    sent = upstream.bodies("/v1/chat/completions")[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather" and sent[-1]["content"] == "sunny, 21 C"


def test_an_unknown_model_is_anthropics_not_found(claude: anthropic.Anthropic, mcp_servers: McpServers) -> None:
    with pytest.raises(anthropic.NotFoundError) as refused:
        claude.beta.messages.create(model="no-such-model", max_tokens=16, betas=BETA, messages=[{"role": "user", "content": "hi"}],
                                    mcp_servers=[server(mcp_servers.open)])
    assert refused.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_count_tokens_counts_with_the_mcp_servers_tools(claude: anthropic.Anthropic, mcp_servers: McpServers, upstream: FakeUpstream) -> None:
    counted = claude.beta.messages.count_tokens(model="fake-model", betas=BETA, messages=[{"role": "user", "content": "count these words"}],
                                                mcp_servers=[server(mcp_servers.open, tool_configuration={"allowed_tools": ["echo"]})])
    assert counted.input_tokens > 0
    sent = upstream.bodies("/v1/chat/completions")[-1]
    assert sent["max_completion_tokens"] == 1 and [tool["function"]["name"] for tool in sent["tools"]] == ["echo"]
