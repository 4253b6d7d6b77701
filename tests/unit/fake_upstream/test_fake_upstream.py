"""The fake upstream, exercised over real HTTP through the openai SDK."""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from fake_upstream import CREATED, running_fake_upstream
from fake_upstream.app import embedding_vector, parse_directives, split_arguments
from fake_upstream.server import FakeUpstream

TESTS_DIR = Path(__file__).resolve().parents[2]
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with running_fake_upstream() as running:
        yield running


@pytest.fixture(scope="module")
def client(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0) as sdk:
        yield sdk


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def ask(client: openai.OpenAI, text: str, **kwargs: Any) -> Any:
    return client.chat.completions.create(model=kwargs.pop("model", "fake-model"), messages=user(text), **kwargs)


def stream(client: openai.OpenAI, text: str, **kwargs: Any) -> list[ChatCompletionChunk]:
    return list(ask(client, text, stream=True, **kwargs))


# -- pure helpers ------------------------------------------------------------------------------


def test_parse_directives_combines_and_keeps_malformed_text() -> None:
    parsed = parse_directives('a [tokens:3] [tool:f {"x": [1]}] [tool:g] [slow:5] [reasoning] [tokens:x] [nope] b')
    assert parsed.tokens == 3 and parsed.slow_ms == 5 and parsed.reasoning
    assert [(t.name, t.arguments) for t in parsed.tools] == [("f", '{"x": [1]}'), ("g", "{}")]
    assert parsed.text == "a      [tokens:x] [nope] b"
    assert parse_directives("[error:200]").error is None


def test_split_arguments_gives_two_or_three_pieces() -> None:
    assert split_arguments("{}") == ["{", "}"]
    assert "".join(split_arguments('{"city": "Paris"}')) == '{"city": "Paris"}'
    assert len(split_arguments('{"city": "Paris"}')) == 3


# -- models ------------------------------------------------------------------------------------


def test_lists_models(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake-model", "fake-reasoner", "fake-embed"]
    assert {(m.created, m.owned_by) for m in models.data} == {(CREATED, "fake")}


# -- chat, non-stream --------------------------------------------------------------------------


def test_default_answer_echoes_and_is_deterministic(client: openai.OpenAI) -> None:
    first = ask(client, "  Hello there  ")
    assert first.choices[0].message.content == "You said: Hello there"
    assert first.choices[0].finish_reason == "stop"
    assert first.created == CREATED and first.model == "fake-model"
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.total_tokens) == (2, 4, 6)
    assert ask(client, "  Hello there  ").id == first.id != ask(client, "Other").id
    assert ask(client, "[slow:1]").choices[0].message.content == "Hello from the fake upstream."


def test_text_parts_are_concatenated(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}
    ]
    answer = client.chat.completions.create(model="fake-model", messages=messages)
    assert answer.choices[0].message.content == "You said: Hi there"


def test_tokens_directive(client: openai.OpenAI) -> None:
    answer = ask(client, "[tokens:5]")
    assert answer.choices[0].message.content == "tok1 tok2 tok3 tok4 tok5"
    assert answer.usage.completion_tokens == 5


def test_tool_calls_need_tools_in_the_request(client: openai.OpenAI) -> None:
    text = 'weather? [tool:get_weather {"city": "Paris"}] [tool:get_time {}]'
    answer = ask(client, text, tools=TOOLS)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.type, c.function.name, c.function.arguments) for c in calls] == [
        ("function", "get_weather", '{"city": "Paris"}'),
        ("function", "get_time", "{}"),
    ]
    assert all(c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id
    assert ask(client, text).choices[0].message.content == "You said: weather?"


def test_tool_result_is_answered(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": '[tool:get_weather {"city": "Paris"}]'},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    answer = client.chat.completions.create(model="fake-model", messages=messages, tools=TOOLS)
    assert answer.choices[0].message.content == "Tool result: sunny, 21C"
    assert answer.choices[0].finish_reason == "stop"


def test_again_keeps_calling_after_tool_results(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": '[again] [tool:get_time]'},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
    ]
    answer = client.chat.completions.create(model="fake-model", messages=messages, tools=TOOLS)
    assert answer.choices[0].finish_reason == "tool_calls"
    assert [call.function.name for call in answer.choices[0].message.tool_calls or []] == ["get_time"]
    # Without tools to call, it answers the result.
    assert client.chat.completions.create(model="fake-model", messages=messages).choices[0].message.content == "Tool result: noon"


def test_fix_makes_its_calls_once_after_tool_results(client: openai.OpenAI) -> None:
    first_call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "mars"}'}}
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": '[tool:get_time {"tz": "mars"}] [fix:get_time {"tz": "UTC"}]'},
        {"role": "assistant", "content": None, "tool_calls": [first_call]},  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": "call_1", "content": "unknown zone"},
    ]
    answer = client.chat.completions.create(model="fake-model", messages=messages, tools=TOOLS)
    (fixed,) = answer.choices[0].message.tool_calls or []
    assert (fixed.function.name, fixed.function.arguments) == ("get_time", '{"tz": "UTC"}')  # type: ignore[union-attr]
    messages += [{"role": "assistant", "content": None, "tool_calls": [fixed.model_dump()]},  # type: ignore[list-item]
                 {"role": "tool", "tool_call_id": fixed.id, "content": "noon"}]
    assert client.chat.completions.create(model="fake-model", messages=messages, tools=TOOLS).choices[0].message.content == "Tool result: noon"


@pytest.mark.parametrize(
    ("status", "error_class", "error_type"),
    [
        (400, openai.BadRequestError, "invalid_request_error"),
        (401, openai.AuthenticationError, "authentication_error"),
        (404, openai.NotFoundError, "not_found_error"),
        (429, openai.RateLimitError, "rate_limit_error"),
        (500, openai.InternalServerError, "server_error"),
        (503, openai.InternalServerError, "server_error"),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
def test_error_directive(
    client: openai.OpenAI, status: int, error_class: type[openai.APIStatusError], error_type: str, streamed: bool
) -> None:
    with pytest.raises(error_class) as caught:
        ask(client, f"boom [error:{status}]", stream=streamed)
    assert caught.value.status_code == status
    assert caught.value.type == error_type and caught.value.message.endswith(f"fake upstream error {status}")
    assert caught.value.response.headers.get("retry-after") == ("7" if status == 429 else None)


def test_context_overflow(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, "[context_overflow]")
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 1000 tokens" in caught.value.message
    history: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x" * 10_000}] * 2
    assert client.chat.completions.create(model="fake-model", messages=history).choices
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model="fake-model", messages=[*history, *user("one more")])


def test_unknown_model_and_missing_messages(upstream: FakeUpstream, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        ask(client, "hi", model="gpt-nope")
    assert caught.value.body == {
        "message": "The model `gpt-nope` does not exist",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    answer = httpx2.post(f"{upstream.base_url}/chat/completions", json={"model": "fake-model"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "messages"
    garbage = httpx2.post(f"{upstream.base_url}/chat/completions", content=b"{not json")
    assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests[-1].body == "{not json"


def test_reasoning(client: openai.OpenAI) -> None:
    for answer in (ask(client, "hi [reasoning]"), ask(client, "hi", model="fake-reasoner")):
        message = answer.choices[0].message
        assert getattr(message, "reasoning_content") == "Thinking about it."
        assert message.content == "You said: hi"
        assert answer.usage.completion_tokens_details.reasoning_tokens == 3
        assert answer.usage.completion_tokens == 3 + 3


def test_refusal(client: openai.OpenAI) -> None:
    message = ask(client, "[refusal]").choices[0].message
    assert (message.content, message.refusal) == (None, "I can't help with that.")


def test_n_choices(client: openai.OpenAI) -> None:
    answer = ask(client, "hi", n=3)
    assert [(c.index, c.message.content) for c in answer.choices] == [
        (0, "You said: hi"),
        (1, "You said: hi (choice 1)"),
        (2, "You said: hi (choice 2)"),
    ]


def test_max_tokens_and_stop(client: openai.OpenAI) -> None:
    for limit in ({"max_tokens": 2}, {"max_completion_tokens": 2}):
        choice = ask(client, "[tokens:5]", **limit).choices[0]
        assert (choice.message.content, choice.finish_reason) == ("tok1 tok2", "length")
    choice = ask(client, "[tokens:5]", stop=[" tok3", "zzz"]).choices[0]
    assert (choice.message.content, choice.finish_reason) == ("tok1 tok2", "stop")


@pytest.mark.parametrize(
    "response_format",
    [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}],
)
def test_json_response_format(client: openai.OpenAI, response_format: Any) -> None:
    content = ask(client, "hi", response_format=response_format).choices[0].message.content
    assert json.loads(content) == {"answer": "You said: hi"}


def test_logprobs(client: openai.OpenAI) -> None:
    logprobs = ask(client, "[tokens:3]", logprobs=True, top_logprobs=2).choices[0].logprobs
    assert [(e.token, e.logprob) for e in logprobs.content] == [("tok1", -0.1), (" tok2", -0.1), (" tok3", -0.1)]
    assert [t.token for t in logprobs.content[1].top_logprobs] == [" tok2", "alt1"]
    assert ask(client, "hi").choices[0].logprobs is None


def test_slow_delays_the_answer(client: openai.OpenAI) -> None:
    start = time.monotonic()
    stream(client, "[tokens:2] [slow:40]")  # role, 2 tokens, finish: 4 chunks and [DONE]
    assert time.monotonic() - start >= 0.2


# -- chat, streamed ----------------------------------------------------------------------------


def test_stream_chunk_sequence(client: openai.OpenAI) -> None:
    chunks = stream(client, "[tokens:3]", stream_options={"include_usage": True})
    assert len({c.id for c in chunks}) == 1 and {c.object for c in chunks} == {"chat.completion.chunk"}
    deltas = [c.choices[0].delta for c in chunks[:-1]]
    assert (deltas[0].role, deltas[0].content) == ("assistant", "")
    assert [d.content for d in deltas[1:4]] == ["tok1", " tok2", " tok3"]
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-2].choices[0].delta.content is None
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    assert stream(client, "[tokens:3]")[-1].choices[0].finish_reason == "stop"  # no usage chunk


def test_stream_tool_calls(client: openai.OpenAI) -> None:
    chunks = stream(client, '[tool:get_weather {"city": "Paris"}] [tool:get_time]', tools=TOOLS)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            if delta.id is not None:
                assert delta.function is not None and delta.function.arguments == ""
                calls[delta.index] = {"id": delta.id, "name": delta.function.name or "", "arguments": ""}
            else:
                assert delta.function is not None
                calls[delta.index]["arguments"] += delta.function.arguments or ""
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_time", "{}"),
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    again = stream(client, '[tool:get_weather {"city": "Paris"}] [tool:get_time]', tools=TOOLS)
    header = again[1].choices[0].delta.tool_calls
    assert header is not None and header[0].id == calls[0]["id"]  # deterministic


def test_stream_reasoning_comes_before_content(client: openai.OpenAI) -> None:
    deltas = [c.choices[0].delta for c in stream(client, "hi", model="fake-reasoner")]
    reasoning = [getattr(d, "reasoning_content", None) for d in deltas]
    assert "".join(r for r in reasoning if r) == "Thinking about it."
    last_reasoning = max(i for i, r in enumerate(reasoning) if r)
    first_content = min(i for i, d in enumerate(deltas) if d.content)
    assert last_reasoning < first_content
    assert "".join(d.content or "" for d in deltas) == "You said: hi"


def test_stream_n_choices_and_logprobs(client: openai.OpenAI) -> None:
    chunks = stream(client, "[tokens:2]", n=2, logprobs=True)
    texts = {0: "", 1: ""}
    for chunk in chunks:
        texts[chunk.choices[0].index] += chunk.choices[0].delta.content or ""
    assert texts == {0: "tok1 tok2", 1: "tok1 tok2 (choice 1)"}
    logprobs = [c.choices[0].logprobs for c in chunks[1:3]]
    assert [lp.content[0].token for lp in logprobs if lp and lp.content] == ["tok1", " tok2"]


def test_cut_stream_breaks_the_sdk_iteration(client: openai.OpenAI) -> None:
    received: list[ChatCompletionChunk] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in ask(client, "[tokens:10] [cut:3]", stream=True):
            received.append(chunk)
    assert len(received) == 3
    assert ask(client, "still serving").choices[0].message.content == "You said: still serving"


# -- embeddings --------------------------------------------------------------------------------


def test_embeddings_float_and_base64_agree(client: openai.OpenAI) -> None:
    floats = client.embeddings.create(model="fake-embed", input=["alpha", "beta"], encoding_format="float")
    decoded = client.embeddings.create(model="fake-embed", input=["alpha", "beta"])  # SDK asks for base64
    assert [e.embedding for e in floats.data] == [e.embedding for e in decoded.data]
    assert floats.data[0].embedding == embedding_vector("alpha", 8) != floats.data[1].embedding
    assert all(math.isclose(math.fsum(v * v for v in e.embedding), 1.0, rel_tol=1e-5) for e in floats.data)
    assert floats.usage.prompt_tokens == 2 and floats.model == "fake-embed"
    raw = client.embeddings.create(model="fake-embed", input="alpha", encoding_format="base64", dimensions=3)
    vector = list(struct.unpack("<3f", base64.b64decode(str(raw.data[0].embedding))))
    assert vector == embedding_vector("alpha", 3)


def test_embeddings_of_token_arrays_and_wrong_model(client: openai.OpenAI) -> None:
    answer = client.embeddings.create(model="fake-embed", input=[[1, 2, 3], [4]], dimensions=16)
    assert [len(e.embedding) for e in answer.data] == [16, 16] and answer.usage.prompt_tokens == 4
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="fake-model", input="x")


# -- recording, auth, process ------------------------------------------------------------------


def test_records_request_bodies(upstream: FakeUpstream, client: openai.OpenAI) -> None:
    ask(client, "record me", seed=7, metadata={"k": "v"}, extra_body={"top_k": 3})
    recorded = upstream.requests[-1]
    assert recorded.path == "/v1/chat/completions" and recorded.method == "POST"
    assert recorded.headers["authorization"] == "Bearer k"
    body = upstream.bodies()[-1]
    assert (body["seed"], body["metadata"], body["top_k"]) == (7, {"k": "v"}, 3)


def test_api_key_is_required_when_set() -> None:
    with running_fake_upstream(api_key="secret") as secured:
        with openai.OpenAI(base_url=secured.base_url, api_key="wrong", max_retries=0) as wrong:
            with pytest.raises(openai.AuthenticationError):
                wrong.models.list()
            with pytest.raises(openai.AuthenticationError):
                ask(wrong, "hi")
            with pytest.raises(openai.AuthenticationError):
                wrong.embeddings.create(model="fake-embed", input="x")
        with openai.OpenAI(base_url=secured.base_url, api_key="secret", max_retries=0) as right:
            assert ask(right, "hi").choices[0].message.content == "You said: hi"
        assert len(secured.requests) == 4


def test_runs_as_a_module() -> None:
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR)}
    command = [sys.executable, "-m", "fake_upstream", "--port", "0", "--api-key", "k"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            assert line.startswith("listening on http://127.0.0.1:")
            with openai.OpenAI(base_url=line.removeprefix("listening on ") + "/v1", api_key="k") as sdk:
                assert sdk.models.list().data[0].id == "fake-model"
        finally:
            process.terminate()
            process.wait(5)


def test_stops_promptly_with_a_stream_in_flight() -> None:
    errors: list[Exception] = []

    def consume(sdk: openai.OpenAI) -> None:
        try:
            stream(sdk, "[tokens:100] [slow:100]")
        except openai.APIConnectionError as error:
            errors.append(error)

    with running_fake_upstream() as running:
        sdk = openai.OpenAI(base_url=running.base_url, api_key="k", max_retries=0)
        consumer = threading.Thread(target=consume, args=(sdk,))
        consumer.start()
        time.sleep(0.2)
        started = time.monotonic()
    assert time.monotonic() - started < 1.0
    consumer.join(5)
    sdk.close()
    assert len(errors) == 1
