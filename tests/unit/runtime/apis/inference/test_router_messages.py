"""The inference router's Messages pass-through (`messages`, `stream_messages`), as a
specification: which models pass, the bytes a provider of Anthropic's API is sent and what the
client gets back, and what chat calls get besides (metrics, quotas, traces, health)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from builder.config import SqliteBackend, TracingConfig
from contract.errors import InvalidRequestError, UpstreamError
from contract.inference.protocol import MessagesPassthrough, UpstreamModel, UpstreamRequest
from runtime.apis.inference.anthropic_passthrough import message_usage, renamed, usage_of_message
from runtime.apis.inference.router import InferenceRouter
from runtime.apis.inference.store import ChatCompletionStore
from runtime.observability.metrics import Metrics
from runtime.observability.tracing import Tracing
from runtime.security.quotas import meter_tokens, reset_meter, usage_total
from runtime.storage import open_database

USAGE = {"input_tokens": 7, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 2, "output_tokens": 5}
BODY = b'{ "model" : "claude/sonnet",  "max_tokens": 64,\n "messages": [{"role": "user", "content": "Hi \\u00e9"}], "stream": false}'


def answer(model: str) -> bytes:
    return (b'{"id":"msg_1","type":"message","role":"assistant","model": "' + model.encode() +
            b'","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":' +
            json.dumps(USAGE).encode() + b"}")


def events(model: str, *, broken: bool = False) -> list[bytes]:
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
                                                  "usage": {**USAGE, "output_tokens": 1}}}
    frames: list[dict[str, Any]] = [start, {"type": "ping"}, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}]
    if broken:
        frames.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    else:
        frames += [{"type": "content_block_stop", "index": 0},
                   {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 5}},
                   {"type": "message_stop"}]
    return [f"event: {frame['type']}\ndata: {json.dumps(frame)}\n\n".encode() for frame in frames]


class FakeAnthropicProvider:
    """An inference provider of Anthropic's API: chat it does not need here; Messages answered
    from what it holds, and the bytes it was sent kept."""

    def __init__(self, name: str, models: list[str]) -> None:
        self.name, self.model_ids = name, models
        self.sent: list[bytes] = []
        self.failure: UpstreamError | None = None
        self.broken = False

    async def list_models(self) -> list[UpstreamModel]:
        return [UpstreamModel(model) for model in self.model_ids]

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        raise AssertionError("a Messages request passed through is no chat completion")

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        raise AssertionError("a Messages request passed through is no chat completion")
        yield b""

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        raise AssertionError("unused")

    async def messages(self, body: bytes) -> bytes:
        self.sent.append(body)
        if self.failure is not None:
            raise self.failure
        return answer(json.loads(body)["model"])

    async def stream_messages(self, body: bytes) -> AsyncIterator[bytes]:
        self.sent.append(body)
        if self.failure is not None:
            raise self.failure
        for frame in events(json.loads(body)["model"], broken=self.broken):
            yield frame


class ChatOnly(FakeAnthropicProvider):
    messages = None  # type: ignore[assignment]
    stream_messages = None  # type: ignore[assignment]


@pytest.fixture
async def router(tmp_path: Path) -> AsyncIterator[tuple[InferenceRouter, FakeAnthropicProvider]]:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    store = ChatCompletionStore(db)
    await store.create_tables()
    claude = FakeAnthropicProvider("claude", ["sonnet", "haiku"])
    router = InferenceRouter({"claude": claude, "vllm": ChatOnly("vllm", ["llama"])}, [], store)
    await router.refresh_models()
    yield router, claude
    await db.close()


@pytest.fixture
def metered() -> Iterator[tuple[Metrics, list[int]]]:
    metrics, spent = Metrics(), []

    async def record(usage: Mapping[str, Any]) -> None:
        spent.append(usage_total(usage))

    entered, meter = metrics.enter(), meter_tokens(record)
    yield metrics, spent
    reset_meter(meter)
    metrics.leave(entered)


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_provider_of_anthropics_api_is_a_messages_passthrough() -> None:
    assert isinstance(FakeAnthropicProvider("c", []), MessagesPassthrough)
    assert not isinstance(ChatOnly("c", []), MessagesPassthrough)


async def test_only_the_models_of_such_a_provider_pass(router: tuple[InferenceRouter, FakeAnthropicProvider]) -> None:
    inference, _ = router
    assert await inference.passes_messages("claude/sonnet") and await inference.passes_messages("haiku")
    assert not await inference.passes_messages("vllm/llama")
    assert not await inference.passes_messages("gpt-9") and not await inference.passes_messages(None)  # the checks word those
    with pytest.raises(InvalidRequestError) as refused:
        await inference.messages({"model": "llama"}, b"{}")
    assert refused.value.param == "model" and refused.value.code == "unsupported_model"


async def test_the_clients_bytes_go_up_untouched_but_for_the_model_and_come_back_with_its_id(
        router: tuple[InferenceRouter, FakeAnthropicProvider]) -> None:
    inference, claude = router
    result = await inference.messages(json.loads(BODY), BODY)
    assert claude.sent[-1] == BODY.replace(b'"claude/sonnet"', b'"sonnet"').replace(b'"model" : ', b'"model":')
    assert result == answer("sonnet").replace(b'"model": "sonnet"', b'"model":"claude/sonnet"')
    same = BODY.replace(b"claude/sonnet", b"sonnet")
    assert await inference.messages(json.loads(same), same) == answer("sonnet")  # the upstream's name: nothing renamed
    assert claude.sent[-1] is same


def test_a_model_pair_written_twice_is_renamed_where_it_stands_at_the_top() -> None:
    body = b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","input":{"model":"claude/sonnet"}}]}],"model":"claude/sonnet"}'
    again = json.loads(renamed(body, "claude/sonnet", "sonnet"))
    assert again["model"] == "sonnet" and again["messages"][0]["content"][0]["input"] == {"model": "claude/sonnet"}


def test_an_answer_naming_the_model_otherwise_still_shows_the_clients_id() -> None:
    # Anthropic answers an alias with the dated model it stands for.
    assert json.loads(renamed(answer("sonnet-20250929"), "sonnet", "claude/sonnet"))["model"] == "claude/sonnet"


def test_anthropics_usage_counts_the_cache_in_the_prompt() -> None:
    assert message_usage(USAGE) == {"prompt_tokens": 19, "completion_tokens": 5, "total_tokens": 24}
    assert message_usage({"input_tokens": 3, "cache_read_input_tokens": None, "output_tokens": 1})["total_tokens"] == 4
    assert usage_of_message(b"not json") == {} and usage_of_message(answer("m"))["prompt_tokens"] == 19


async def test_an_answer_is_metered_and_counted_against_the_quota(router: tuple[InferenceRouter, FakeAnthropicProvider],
                                                                  metered: tuple[Metrics, list[int]]) -> None:
    inference, _ = router
    metrics, spent = metered
    await inference.messages(json.loads(BODY), BODY)
    assert spent == [24]
    counted = samples(metrics)
    tokens = (("model", "sonnet"), ("provider", "claude"))
    assert counted[("stack_tokens_total", (("direction", "in"), *tokens))] == 19
    assert counted[("stack_tokens_total", (("direction", "out"), *tokens))] == 5
    assert counted[("stack_upstream_duration_seconds_count", (("kind", "messages"), *tokens))] == 1


async def test_a_stream_passes_each_event_as_it_came_with_the_clients_model(router: tuple[InferenceRouter, FakeAnthropicProvider],
                                                                           metered: tuple[Metrics, list[int]]) -> None:
    inference, claude = router
    metrics, spent = metered
    body = BODY.replace(b'"stream": false', b'"stream": true')
    frames = [frame async for frame in await inference.stream_messages(json.loads(body), body)]
    upstream = events("sonnet")
    assert frames[0] == upstream[0].replace(b'"model": "sonnet"', b'"model":"claude/sonnet"') and frames[1:] == upstream[1:]
    assert json.loads(claude.sent[-1])["model"] == "sonnet"
    assert spent == [24]  # message_start's input, message_delta's output
    counted = samples(metrics)
    tokens = (("model", "sonnet"), ("provider", "claude"))
    assert counted[("stack_tokens_total", (("direction", "in"), *tokens))] == 19
    assert counted[("stack_upstream_time_to_first_token_seconds_count", tokens)] == 1
    assert counted[("stack_upstream_duration_seconds_count", (("kind", "messages"), *tokens))] == 1


async def test_a_stream_broken_before_its_end_counts_what_message_start_said(router: tuple[InferenceRouter, FakeAnthropicProvider],
                                                                            metered: tuple[Metrics, list[int]]) -> None:
    inference, claude = router
    _, spent = metered
    claude.broken = True
    frames = [frame async for frame in await inference.stream_messages({"model": "haiku"}, b'{"model":"haiku","stream":true}')]
    assert frames[-1].startswith(b"event: error\n") and spent == [20]


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_upstreams_errors_pass_as_they_are_and_an_unreachable_one_is_noted(
        router: tuple[InferenceRouter, FakeAnthropicProvider], streamed: bool) -> None:
    inference, claude = router
    claude.failure = UpstreamError("Overloaded", status_code=529, error_type="overloaded_error", headers={"retry-after": "7"})
    with pytest.raises(UpstreamError) as refused:
        await _call(inference, streamed)
    assert (refused.value.status, refused.value.error_type, refused.value.message) == (529, "overloaded_error", "Overloaded")
    assert inference.health()["claude"]["status"] == "ok"
    claude.failure = UpstreamError("inference provider 'claude' could not be reached: cannot connect", code="upstream_unreachable")
    with pytest.raises(UpstreamError):
        await _call(inference, streamed)
    assert inference.health()["claude"] == {"status": "unavailable", "detail": claude.failure.message, "models": 2}


async def _call(inference: InferenceRouter, streamed: bool) -> Any:
    if not streamed:
        return await inference.messages({"model": "haiku"}, b'{"model":"haiku"}')
    return [frame async for frame in await inference.stream_messages({"model": "haiku"}, b'{"model":"haiku","stream":true}')]


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_model_call_is_traced_with_its_usage_and_stop_reason(router: tuple[InferenceRouter, FakeAnthropicProvider],
                                                                       streamed: bool) -> None:
    inference, _ = router
    tracing = Tracing(TracingConfig(exporter="memory"))
    entered = tracing.enter({"type": "http", "method": "POST", "path": "/v1/messages", "headers": []}, "req_1")
    assert entered is not None
    try:
        await _call(inference, streamed)
    finally:
        tracing.leave(entered, {"type": "http", "method": "POST", "path": "/v1/messages"}, "/v1/messages", 200)
    span = next(span for span in tracing.exporter.get_finished_spans() if span.name == "chat haiku")
    assert span.attributes["gen_ai.provider.name"] == "claude"
    assert (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"]) == (19, 5)
    assert list(span.attributes["gen_ai.response.finish_reasons"]) == ["end_turn"]
