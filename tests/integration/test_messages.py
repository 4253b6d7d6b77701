"""Anthropic's Messages API (issue 46, item 1) through the `anthropic` SDK, over the OpenAI-shaped
fake upstream, as a server and as a library: plain and streamed answers, tool turns, thinking
handed back, count_tokens, models in Anthropic's shape, and every refusal in Anthropic's envelope."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from fake_upstream.server import FakeUpstream
from support.documents import pdf_with_pages

from runtime.testing.targets import StackTarget

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def claude(live: StackTarget) -> Iterator[anthropic.Anthropic]:
    client = live.anthropic(max_retries=0)
    yield client
    client.close()


def test_a_message_is_answered_in_anthropics_shape(claude: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    message = claude.messages.create(model="fake-model", max_tokens=64, system="Be brief.",
                                     messages=[{"role": "user", "content": "[tokens:3] hi"}])
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"] and message.content[0].text == "tok1 tok2 tok3"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.model == "fake-model"
    assert message.usage.output_tokens == 3 and message.usage.input_tokens > 0
    sent = upstream.bodies("/v1/chat/completions")[-1]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."} and sent["max_completion_tokens"] == 64


def test_a_streamed_message_gives_anthropics_events_and_the_sdk_folds_them(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model="fake-model", max_tokens=64, messages=[{"role": "user", "content": "[tokens:4] hi"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta"} <= set(kinds)
    assert final.content[0].text == "tok1 tok2 tok3 tok4" and final.stop_reason == "end_turn"  # type: ignore[union-attr]


def test_max_tokens_cuts_the_answer(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="fake-model", max_tokens=2, messages=[{"role": "user", "content": "[tokens:9] hi"}])
    assert message.stop_reason == "max_tokens"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_tool_turn_round_trips(claude: anthropic.Anthropic, upstream: FakeUpstream, stream: bool) -> None:
    ask = {"role": "user", "content": '[tool:get_weather {"city": "Paris"}] weather?'}
    if stream:
        with claude.messages.stream(model="fake-model", max_tokens=64, tools=[WEATHER], messages=[ask]) as events:  # type: ignore[list-item]
            first = events.get_final_message()
    else:
        first = claude.messages.create(model="fake-model", max_tokens=64, tools=[WEATHER], messages=[ask])  # type: ignore[list-item]
    assert first.stop_reason == "tool_use"
    use = next(block for block in first.content if block.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")
    answer = claude.messages.create(model="fake-model", max_tokens=64, tools=[WEATHER], messages=[  # type: ignore[list-item]
        ask, {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]}])
    assert answer.stop_reason == "end_turn"
    sent = upstream.bodies("/v1/chat/completions")[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == use.id and sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "sunny, 21 C"}


def test_thinking_is_signed_and_read_back(claude: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    ask = {"role": "user", "content": "[reasoning] [tokens:2] think"}
    first = claude.messages.create(model="fake-model", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
                                   messages=[ask])  # type: ignore[list-item]
    thinking = next(block for block in first.content if block.type == "thinking")
    assert thinking.thinking and thinking.signature
    claude.messages.create(model="fake-model", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}, messages=[
        ask, {"role": "assistant", "content": first.content}, {"role": "user", "content": "[tokens:1] and?"}])  # type: ignore[typeddict-item]
    handed_back = upstream.bodies("/v1/chat/completions")[-1]["messages"][1]
    assert handed_back["role"] == "assistant" and handed_back["reasoning_content"] == thinking.thinking


def test_count_tokens_is_the_models_count(claude: anthropic.Anthropic) -> None:
    counted = claude.messages.count_tokens(model="fake-model", messages=[{"role": "user", "content": "count these four words"}])
    assert counted.input_tokens == 4


def test_models_are_listed_in_anthropics_shape(claude: anthropic.Anthropic) -> None:
    models = claude.models.list()
    assert "fake/fake-model" in [model.id for model in models.data] and models.data[0].type == "model"
    assert claude.models.retrieve("fake-model").id == "fake/fake-model"


@pytest.mark.parametrize(("messages", "max_tokens", "param"), [
    ([{"role": "user", "content": "hi"}], None, "max_tokens"),
    ([{"role": "user", "content": [{"type": "tool_result"}]}], 16, "messages.0.content.0.tool_result.tool_use_id: Field required"),  # the block type in the path, as Anthropic words it
    ([], 16, "messages"),
], ids=["no max_tokens", "tool_result without its id", "no messages"])
def test_a_mistake_is_anthropics_400_naming_the_field(live: StackTarget, messages: list[object], max_tokens: int | None,
                                                       param: str) -> None:
    body = {"model": "fake-model", "messages": messages, **({"max_tokens": max_tokens} if max_tokens else {})}
    answer = _post(live, "/messages", body)
    assert answer.status_code == 400 and answer.headers["request-id"]
    envelope = answer.json()
    assert envelope["type"] == "error" and envelope["error"]["type"] == "invalid_request_error"
    assert envelope["error"]["message"].startswith(param) and envelope["request_id"] == answer.headers["request-id"]


def test_an_unknown_model_is_anthropics_not_found(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as error:
        claude.messages.create(model="no-such-model", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert error.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_an_upstream_overloaded_is_anthropics_529(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as error:
        claude.messages.create(model="fake-model", max_tokens=16, messages=[{"role": "user", "content": "[error:503] busy"}])
    assert error.value.status_code == 529 and error.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def _post(live: StackTarget, path: str, body: object) -> httpx2.Response:
    if live.library is not None:
        with live.library.http_client() as http:
            return http.post(path.lstrip("/"), content=json.dumps(body), headers={"content-type": "application/json"})
    return httpx2.post(live.base_url + path, content=json.dumps(body), headers={"content-type": "application/json"})


FACTS = "The grass is green. The sky is blue."
CITED_ANSWER = 'Grass is green [0.1]. And the page says hello.[1.1][1.2][9.9]'


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_cited_documents_are_answered_with_citations(claude: anthropic.Anthropic, upstream: FakeUpstream, stream: bool) -> None:
    pdf = base64.b64encode(pdf_with_pages("Page one says hello.", "Page two says goodbye.")).decode()
    content = [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": FACTS}, "title": "Facts",
         "citations": {"enabled": True}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}, "title": "Pages",
         "citations": {"enabled": True}},
        {"type": "text", "text": f"[answer {json.dumps({'text': CITED_ANSWER})}] What do they say?"},
    ]
    ask: dict[str, Any] = {"model": "fake-model", "max_tokens": 64, "messages": [{"role": "user", "content": content}]}
    if stream:
        with claude.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(**ask)
    blocks = [(block.text, [(c.type, c.cited_text, c.document_index) for c in block.citations or ()])  # type: ignore[union-attr]
              for block in message.content]
    assert blocks == [("Grass is green", [("char_location", "The grass is green. ", 0)]), (". ", []),
                      ("And the page says hello.", [("page_location", "Page one says hello.", 1), ("page_location", "Page two says goodbye.", 1)])]
    page = message.content[2].citations[1]  # type: ignore[union-attr]
    assert (page.start_page_number, page.end_page_number, page.document_title) == (2, 3, "Pages")  # type: ignore[union-attr]
    sent = upstream.bodies("/v1/chat/completions")[-1]["messages"]
    assert "[0.1]" in sent[0]["content"] and "[1.2] Page two says goodbye." in sent[1]["content"][1]["text"]
