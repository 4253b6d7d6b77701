"""The `anthropic` provider over HTTP: against the fake Anthropic upstream, through the stack's own
transport (as a stack opens it), and against httpx2 handlers for answers no server should give."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from builder.load import parse_config
from builder.resolve import resolve
from contract.errors import InvalidRequestError, UpstreamError
from contract.inference.protocol import UpstreamRequest
from contract.spec import Api
from fake_anthropic import MODELS, RETRY_AFTER_S, FakeAnthropic, running_fake_anthropic, sign
from providers.inference.anthropic import AnthropicConfig, AnthropicProvider
from providers.inference.anthropic.provider import api_base
from runtime.stack import open_stack

MODEL = MODELS[0]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeAnthropic]:
    with running_fake_anthropic(api_key="secret") as server:
        yield server


async def opened(tmp_path: Path, **config: Any) -> AsyncIterator[AnthropicProvider]:
    document = {"state_dir": str(tmp_path / "state"), "recording": {"mode": "live"},
                "providers": {"inference": [{"provider_id": "claude", "provider_type": "anthropic", "config": config}]}}
    async with open_stack(resolve(parse_config(document, {}), {})) as stack:
        yield stack.impls[Api.inference].providers["claude"]


@pytest.fixture
async def provider(tmp_path: Path, upstream: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    async for opened_provider in opened(tmp_path, base_url=upstream.url, api_key="secret", beta=["one-2025", "two-2025"]):
        yield opened_provider


def chat(text: str, **extra: Any) -> UpstreamRequest:
    return UpstreamRequest({"model": MODEL, "messages": [{"role": "user", "content": text}], **extra})


async def test_a_chat_completion_is_sent_with_anthropics_headers_and_answered_in_openais_shape(
        provider: AnthropicProvider, upstream: FakeAnthropic) -> None:
    completion = json.loads(await provider.chat_completion(chat("Hi")))
    assert completion["choices"][0]["message"]["content"] == "Hello from the fake Anthropic upstream."
    headers = upstream.requests[-1].headers
    assert headers["x-api-key"] == "secret" and headers["anthropic-version"] == "2023-06-01"
    assert headers["anthropic-beta"] == "one-2025,two-2025" and "authorization" not in headers
    assert upstream.bodies()[-1]["max_tokens"] == 4096


async def test_thinking_comes_back_signed_and_goes_back_from_memory_when_only_the_text_returns(
        provider: AnthropicProvider, upstream: FakeAnthropic) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    first = chat('Weather? [tool:get_weather {"city": "Paris"}]', tools=tools, reasoning_effort="low")
    message = json.loads(await provider.chat_completion(first))["choices"][0]["message"]
    assert message["thinking_blocks"][0]["signature"] == sign(message["reasoning_content"])
    turn = [*first.body["messages"], {"role": "assistant", "content": None, "tool_calls": message["tool_calls"],
                                      "reasoning_content": message["reasoning_content"]},
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "sunny"}]
    chunks = [json.loads(raw) async for raw in provider.stream_chat_completion(
        UpstreamRequest({**first.body, "messages": turn, "stream": True}))]
    assert "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"]) == "The tool said: sunny"
    assert upstream.bodies()[-1]["messages"][1]["content"][0] == message["thinking_blocks"][0]
    assert upstream.bodies()[-1]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


@pytest.mark.parametrize(("status", "expected"), [(429, 429), (529, 503), (400, 400), (403, 403)])
async def test_upstream_errors_keep_their_status_and_a_529_is_a_503(provider: AnthropicProvider, status: int, expected: int) -> None:
    with pytest.raises(UpstreamError) as caught:
        await provider.chat_completion(chat(f"Hi [error:{status}]"))
    assert caught.value.status == expected
    if status in (429, 529):
        assert caught.value.headers == {"retry-after": RETRY_AFTER_S}
    with pytest.raises(UpstreamError) as streamed:
        async for _ in provider.stream_chat_completion(chat(f"Hi [error:{status}]", stream=True)):
            pass
    assert streamed.value.status == expected


async def test_a_wrong_key_an_unknown_model_and_an_error_event_mid_stream(tmp_path: Path, upstream: FakeAnthropic,
                                                                          provider: AnthropicProvider) -> None:
    async for wrong in opened(tmp_path, base_url=upstream.url, api_key="nope"):
        with pytest.raises(UpstreamError) as caught:
            await wrong.chat_completion(chat("Hi"))
        assert (caught.value.status, caught.value.message) == (401, "invalid x-api-key")
    with pytest.raises(UpstreamError) as missing:
        await provider.chat_completion(UpstreamRequest({"model": "claude-nope", "messages": [{"role": "user", "content": "Hi"}]}))
    assert (missing.value.status, missing.value.param) == (404, "model")
    received = []
    with pytest.raises(UpstreamError) as event:
        async for raw in provider.stream_chat_completion(chat("Hi [stream_error]", stream=True)):
            received.append(raw)
    assert event.value.status == 503 and len(received) == 1  # the role chunk, then the error


async def test_models_are_listed_page_by_page_or_from_the_config(provider: AnthropicProvider, tmp_path: Path) -> None:
    models = await provider.list_models()
    assert [model.id for model in models] == list(MODELS) and models[0].created == 1739923200
    async for static in opened(tmp_path, base_url="http://127.0.0.1:9", models=["claude-a"]):
        assert [model.id for model in await static.list_models()] == ["claude-a"]


async def test_embeddings_are_refused_naming_the_model(provider: AnthropicProvider) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        await provider.embeddings(UpstreamRequest({"model": MODEL, "input": "hi"}))
    assert caught.value.param == "model" and MODEL in caught.value.message and caught.value.code == "unsupported_model"


async def test_an_unreachable_upstream_is_a_502_that_does_not_name_its_address(tmp_path: Path) -> None:
    async for down in opened(tmp_path, base_url="http://127.0.0.1:9"):
        with pytest.raises(UpstreamError) as caught:
            await down.chat_completion(chat("Hi"))
        assert caught.value.status == 502 and caught.value.code == "upstream_unreachable" and "127.0.0.1" not in caught.value.message


async def test_the_messages_pass_through_forwards_bytes_untouched_and_keeps_a_529(provider: AnthropicProvider,
                                                                                 upstream: FakeAnthropic) -> None:
    body = json.dumps({"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}, indent=1).encode()
    answer = json.loads(await provider.messages(body))
    assert answer["type"] == "message" and upstream.requests[-1].body == json.loads(body)
    frames = [frame async for frame in provider.stream_messages(json.dumps({**json.loads(body), "stream": True}).encode())]
    assert all(frame.startswith(b"event: ") and frame.endswith(b"\n\n") for frame in frames)
    assert frames[0].startswith(b"event: message_start") and frames[-1].startswith(b"event: message_stop")
    overloaded = json.dumps({"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "[error:529]"}]}).encode()
    with pytest.raises(UpstreamError) as caught:
        await provider.messages(overloaded)
    assert (caught.value.status, caught.value.error_type) == (529, "overloaded_error")


def handler_provider(handler: Any) -> AnthropicProvider:
    return AnthropicProvider("claude", httpx2.MockTransport(handler), AnthropicConfig(base_url="http://claude.test/v1"))


async def test_a_malformed_answer_or_a_stream_cut_short_is_a_502() -> None:
    garbled = handler_provider(lambda request: httpx2.Response(200, text='{"id": "msg_1", "content": 5'))
    with pytest.raises(UpstreamError) as caught:
        await garbled.chat_completion(chat("Hi"))
    assert (caught.value.status, caught.value.code) == (502, "upstream_malformed")
    start = 'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {}}}\n\n'
    cut = handler_provider(lambda request: httpx2.Response(200, text=start, headers={"content-type": "text/event-stream"}))
    with pytest.raises(UpstreamError, match="message_stop"):
        async for _ in cut.stream_chat_completion(chat("Hi", stream=True)):
            pass


def test_the_base_url_may_end_in_v1_or_not() -> None:
    assert api_base("https://api.anthropic.com") == api_base("https://api.anthropic.com/v1/") == "https://api.anthropic.com/v1"
