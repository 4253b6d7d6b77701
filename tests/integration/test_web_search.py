"""The `web_search` tool through the openai SDK, in server and library modes, over each search
backend (Tavily, Brave, SearXNG), each played by a fake engine in tests/fake_search that speaks
its HTTP API. The model's turns come from the fake upstream's directives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from fake_search import FakeSearch, running_fake_search
from fake_upstream.server import FakeUpstream, running_fake_upstream
from support.live_stack import run_yaml, served

ANSWER = "In fog the keeper sounds the horn [1]. High water is at 06:12 [2]."
FOG, TIDES = "https://www.lighthouses.example.com/fog", "https://tides.example.org/harbour"


def ask(query: str, answer: str = ANSWER) -> str:
    return f'[tool:web_search {json.dumps({"query": query})}] [answer {json.dumps({"text": answer})}]'


@dataclass
class Stack:
    client: openai.OpenAI
    search: FakeSearch
    upstream: FakeUpstream


def config(root: Path, upstream: str, backend: str) -> Path:
    return run_yaml(root, upstream, f"  conversations: [{{provider_id: builtin, provider_type: builtin}}]\n{backend}", name="web-search")


@pytest.fixture(scope="module", params=[f"{engine}-{mode}" for engine in ("tavily", "brave", "searxng") for mode in ("server", "library")])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    engine, mode = request.param.split("-")
    root = tmp_path_factory.mktemp(f"web-{engine}")
    with running_fake_search(engine) as search, running_fake_upstream() as upstream:
        key = "" if engine == "searxng" else ", api_key: test-key"
        backend = f"  tool_runtime: [{{provider_id: web, provider_type: {engine}, config: {{base_url: \"{search.base_url}\"{key}, timeout_s: 1}}}}]"
        with served(mode, config(root, upstream.base_url, backend)) as client:
            yield Stack(client, search, upstream)


def cited(text: str, annotations: list[Any]) -> list[tuple[str, str, str]]:
    return [(a.type, a.url, text[a.start_index:a.end_index]) for a in annotations]


def test_the_answer_cites_the_pages_it_used_over_the_sentences_that_use_them(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-model", input=ask("fog horn harbour"), tools=[{"type": "web_search"}])
    call, message = response.output
    assert call.type == "web_search_call" and call.status == "completed" and call.id.startswith("ws_")
    assert call.action.type == "search" and call.action.query == "fog horn harbour"
    assert call.action.sources is None  # shown only when include asks
    assert message.type == "message" and message.content[0].type == "output_text"
    text = message.content[0].text
    assert text == "In fog the keeper sounds the horn. High water is at 06:12."
    assert cited(text, message.content[0].annotations) == [("url_citation", FOG, "In fog the keeper sounds the horn"),
                                                            ("url_citation", TIDES, "High water is at 06:12")]
    assert [a.title for a in message.content[0].annotations] == ["Fog signals", "Harbour tide tables"]  # type: ignore[union-attr]
    assert response.tools[0].type == "web_search" and response.tools[0].search_context_size == "medium"  # type: ignore[union-attr]
    # the model read the pages numbered, as plain text
    tool_message = stack.upstream.bodies()[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "[1] Fog signals (https://www.lighthouses.example.com/fog)" in tool_message["content"]
    assert "<strong>" not in tool_message["content"]


def test_sources_are_shown_when_included_now_and_later(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-model", input=ask("fog horn harbour"), tools=[{"type": "web_search_preview"}],
                                             include=["web_search_call.action.sources"])
    sources = response.output[0].action.sources  # type: ignore[union-attr]
    assert [(s.type, s.url) for s in sources] == [("url", FOG), ("url", TIDES)]
    later = stack.client.responses.retrieve(response.id)
    assert later.output[0].action.sources is None  # type: ignore[union-attr]
    again = stack.client.responses.retrieve(response.id, include=["web_search_call.action.sources"])
    assert len(again.output[0].action.sources) == 2  # type: ignore[union-attr]


def test_a_streamed_answer_announces_the_search_and_each_citation(stack: Stack) -> None:
    events = list(stack.client.responses.create(model="fake-model", input=ask("fog horn harbour"), tools=[{"type": "web_search"}],
                                                stream=True))
    kinds = [event.type for event in events]
    searching = [k for k in kinds if k.startswith("response.web_search_call.")]
    assert searching == ["response.web_search_call.in_progress", "response.web_search_call.searching",
                         "response.web_search_call.completed"]
    added = [event.annotation for event in events if event.type == "response.output_text.annotation.added"]
    final = events[-1].response  # type: ignore[union-attr]
    message = final.output[-1]
    assert [a.url for a in added] == [FOG, TIDES] == [a.url for a in message.content[0].annotations]
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    assert "[1]" not in "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]


def test_allowed_domains_and_location_reach_the_engine_and_bound_the_sources(stack: Stack) -> None:
    tool = {"type": "web_search", "filters": {"allowed_domains": ["example.org"]},
            "user_location": {"type": "approximate", "country": "GB", "city": "Bristol"}, "search_context_size": "low"}
    response = stack.client.responses.create(model="fake-model", input=ask("fog horn harbour", "High water is at 06:12 [1]."),
                                             tools=[tool], include=["web_search_call.action.sources"])  # type: ignore[list-item]
    assert [s.url for s in response.output[0].action.sources] == [TIDES]  # type: ignore[union-attr]
    sent = stack.search.requests[-1]
    if stack.search.engine == "tavily":
        assert sent["body"]["include_domains"] == ["example.org"] and sent["body"]["max_results"] == 3
        assert "api_key" not in sent["body"]  # the key goes in the header only
    else:
        assert sent["params"]["q"] == "fog horn harbour site:example.org"
    if stack.search.engine == "brave":
        assert sent["params"]["country"] == "GB" and sent["params"]["count"] == "3"


@pytest.mark.parametrize("query", ["storm [fail]", "storm [slow:3000]"])
def test_an_engine_that_fails_or_times_out_fails_the_call_not_the_response(stack: Stack, query: str) -> None:
    response = stack.client.responses.create(model="fake-model", input=ask(query, "I could not search the web."),
                                             tools=[{"type": "web_search"}])
    call, message = response.output
    assert response.status == "completed" and call.status == "failed"  # type: ignore[union-attr]
    assert message.content[0].text == "I could not search the web." and message.content[0].annotations == []  # type: ignore[union-attr]
    assert stack.upstream.bodies()[-1]["messages"][-1]["content"] == "The search failed; no results."


def test_a_chain_gives_the_model_the_pages_it_read_before(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", input=ask("fog horn harbour"), tools=[{"type": "web_search"}])
    stack.client.responses.create(model="fake-model", input="[tokens:2] and then?", previous_response_id=first.id,
                                  tools=[{"type": "web_search"}])
    messages = stack.upstream.bodies()[-1]["messages"]
    assert any(m["role"] == "tool" and "twice a minute" in m["content"] for m in messages)


@pytest.mark.parametrize(("tool", "param"), [
    ({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size"),
    ({"type": "web_search", "filters": {"allowed_domains": ["https://example.com/path"]}}, "tools[0].filters.allowed_domains"),
    ({"type": "web_search", "user_location": {"type": "approximate", "country": "Britain"}}, "tools[0].user_location.country"),
    ({"type": "web_search", "safe": True}, "tools[0].safe"),
])
def test_a_malformed_tool_is_a_400_naming_the_field(stack: Stack, tool: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-model", input="hi", tools=[tool])  # type: ignore[list-item]
    assert refused.value.body["param"] == param  # type: ignore[index]


def test_without_a_backend_web_search_is_a_400_that_says_what_to_configure(tmp_path: Path) -> None:
    from runtime.library_client import LibraryClient

    with running_fake_upstream() as upstream, LibraryClient(config(tmp_path, upstream.base_url, ""), env={}) as library:
        with pytest.raises(openai.BadRequestError) as refused:
            library.openai(max_retries=0).responses.create(model="fake-model", input="hi", tools=[{"type": "web_search"}])
    assert refused.value.body["param"] == "tools[0].type"  # type: ignore[index]
    assert "tavily, brave or searxng" in refused.value.body["message"]  # type: ignore[index]


def test_a_page_on_a_private_address_is_not_read(stack: Stack) -> None:
    from fake_search import running_fake_pages

    with running_fake_pages() as pages:
        ask_open = f'[tool:open_page {json.dumps({"url": pages + "/pages/fog.html"})}] [answer {json.dumps({"text": "I could not read it."})}]'
        response = stack.client.responses.create(model="fake-model", input=ask_open, tools=[{"type": "web_search"}])
    call = response.output[0]
    assert call.type == "web_search_call" and call.action.type == "open_page" and call.status == "failed"  # type: ignore[union-attr]
    assert stack.upstream.bodies()[-1]["messages"][-1]["content"] == "The page could not be read."


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A stack whose web search may read pages on 127.0.0.1 (run.yaml's allow_private)."""
    from fake_search import running_fake_pages
    from runtime.library_client import LibraryClient

    root = tmp_path_factory.mktemp("web-pages")
    with running_fake_search("searxng") as search, running_fake_upstream() as upstream, running_fake_pages() as pages:
        backend = (f"  tool_runtime: [{{provider_id: web, provider_type: searxng, config: {{base_url: \"{search.base_url}\", "
                   "allow_private: [127.0.0.1], timeout_s: 2}}]")
        with LibraryClient(config(root, upstream.base_url, backend), env={}) as library:
            yield Stack(library.openai(max_retries=0), search, upstream), pages


def test_open_page_reads_the_page_as_text_and_the_answer_cites_it(reader: tuple[Stack, str]) -> None:
    stack, pages = reader
    url = pages + "/pages/fog.html"
    ask_open = f'[tool:open_page {json.dumps({"url": url})}] [answer {json.dumps({"text": "The keeper sounds the horn [1]."})}]'
    response = stack.client.responses.create(model="fake-model", input=ask_open, tools=[{"type": "web_search"}],
                                             include=["web_search_call.action.sources"])
    call, message = response.output
    assert call.status == "completed" and call.action.type == "open_page" and call.action.url == url  # type: ignore[union-attr]
    assert "text" not in call.action.model_dump(exclude_unset=True)  # what the model read is never shown  # type: ignore[union-attr]
    read = stack.upstream.bodies()[-1]["messages"][-1]["content"]
    assert "[1] Fog signals" in read and "twice a minute" in read and "not text" not in read and "color: grey" not in read
    annotation = message.content[0].annotations[0]  # type: ignore[union-attr]
    assert (annotation.type, annotation.url, annotation.title) == ("url_citation", url, "Fog signals")


def test_find_in_page_reads_the_passages_around_the_pattern(reader: tuple[Stack, str]) -> None:
    stack, pages = reader
    url = pages + "/pages/fog.html"
    ask_find = f'[tool:find_in_page {json.dumps({"url": url, "pattern": "bell"})}] [answer {json.dumps({"text": "ok"})}]'
    response = stack.client.responses.create(model="fake-model", input=ask_find, tools=[{"type": "web_search"}])
    call = response.output[0]
    assert call.status == "completed" and call.action.type == "find_in_page" and call.action.pattern == "bell"  # type: ignore[union-attr]
    read = stack.upstream.bodies()[-1]["messages"][-1]["content"]
    assert "The bell is rung when the horn fails." in read
    absent = f'[tool:find_in_page {json.dumps({"url": url, "pattern": "lighthouse cat"})}] [answer {json.dumps({"text": "ok"})}]'
    stack.client.responses.create(model="fake-model", input=absent, tools=[{"type": "web_search"}])
    assert "'lighthouse cat' does not occur in the page." in stack.upstream.bodies()[-1]["messages"][-1]["content"]


@pytest.mark.parametrize(("path", "tool"), [("/pages/image.png", {"type": "web_search"}),
                                            ("/pages/fog.html", {"type": "web_search", "filters": {"allowed_domains": ["example.org"]}})])
def test_a_page_that_is_not_text_or_outside_the_allowed_domains_fails_the_call(reader: tuple[Stack, str], path: str,
                                                                                 tool: dict[str, Any]) -> None:
    stack, pages = reader
    ask_open = f'[tool:open_page {json.dumps({"url": pages + path})}] [answer {json.dumps({"text": "no"})}]'
    response = stack.client.responses.create(model="fake-model", input=ask_open, tools=[tool])  # type: ignore[list-item]
    assert response.status == "completed" and response.output[0].status == "failed"  # type: ignore[union-attr]
