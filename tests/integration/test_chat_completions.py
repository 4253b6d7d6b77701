"""POST /v1/chat/completions through the openai SDK, server and library modes, replayed upstream."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_a_plain_completion(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "Say hi"}])
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "You said: Say hi"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0


def test_the_provider_prefixed_model_id_reaches_the_same_model(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.chat.completions.create(model=f"fake/{text_model}", messages=[{"role": "user", "content": "Say hi"}])
    assert completion.choices[0].message.content == "You said: Say hi"


def test_a_stream_arrives_as_chunks_ending_with_usage(openai_client: openai.OpenAI, text_model: str) -> None:
    stream = openai_client.chat.completions.create(
        model=text_model, messages=[{"role": "user", "content": "[tokens:5]"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "tok1 tok2 tok3 tok4 tok5"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


async def test_the_async_client_streams_too(async_openai_client: openai.AsyncOpenAI, text_model: str) -> None:
    stream = await async_openai_client.chat.completions.create(
        model=text_model, messages=[{"role": "user", "content": "[tokens:3]"}], stream=True
    )
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert pieces == ["tok1", " tok2", " tok3"]


def test_tool_calls_round_trip(openai_client: openai.OpenAI, text_model: str) -> None:
    messages: list[Any] = [{"role": "user", "content": 'Weather? [tool:get_weather {"city": "Paris"}]'}]
    first = openai_client.chat.completions.create(model=text_model, messages=messages, tools=[WEATHER_TOOL], tool_choice="auto", parallel_tool_calls=False)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [choice.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    second = openai_client.chat.completions.create(model=text_model, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "Tool result: sunny"


def test_streamed_tool_calls_assemble(openai_client: openai.OpenAI, text_model: str) -> None:
    stream = openai_client.chat.completions.create(
        model=text_model, stream=True, tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": '[tool:get_weather {"city": "Oslo"}] [tool:get_weather {"city": "Rome"}]'}],
    )
    arguments: dict[int, str] = {}
    for chunk in stream:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments[call.index] = arguments.get(call.index, "") + ((call.function.arguments if call.function else "") or "")
    assert [json.loads(arguments[i]) for i in sorted(arguments)] == [{"city": "Oslo"}, {"city": "Rome"}]


def test_sampling_and_output_parameters_pass_through(openai_client: openai.OpenAI, text_model: str) -> None:
    # The replayed recording is keyed on the exact request body: had any parameter been dropped
    # or changed on the way upstream, the replay would miss and this test would fail.
    completion = openai_client.chat.completions.create(
        model=text_model,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one two three four five six"}],
        n=2, seed=42, temperature=0.2, top_p=0.9, stop=["five"], max_completion_tokens=50,
        logprobs=True, top_logprobs=2, presence_penalty=0.1, frequency_penalty=0.1,
        reasoning_effort="low", user="tester", metadata={"suite": "integration"}, store=False,
        extra_body={"top_k": 5, "repetition_penalty": 1.05},
    )
    assert [choice.index for choice in completion.choices] == [0, 1]
    assert completion.choices[0].message.content == "You said: one two three four"
    assert completion.choices[0].logprobs is not None and completion.choices[0].logprobs.content


def test_max_tokens_cuts_the_answer_with_finish_reason_length(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "[tokens:20]"}], max_completion_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == "tok1 tok2 tok3"


class Answer(BaseModel):
    answer: str


def test_json_schema_response_format_parses(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.chat.completions.parse(model=text_model, messages=[{"role": "user", "content": "json please"}], response_format=Answer)
    parsed = completion.choices[0].message.parsed
    assert parsed == Answer(answer="You said: json please")


def test_images_as_urls_and_data_urls_pass_through(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Describe"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]}])
    assert completion.choices[0].message.content == "You said: Describe"


def test_reasoning_content_from_the_upstream_is_passed_on(openai_client: openai.OpenAI, reasoning_model: str) -> None:
    completion = openai_client.chat.completions.create(model=reasoning_model, messages=[{"role": "user", "content": "Think"}])
    assert getattr(completion.choices[0].message, "reasoning_content", None) == "Thinking about it."
    stream = openai_client.chat.completions.create(model=reasoning_model, messages=[{"role": "user", "content": "Think"}], stream=True)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in stream if c.choices)
    assert reasoning == "Thinking about it."


@pytest.mark.parametrize(("status", "error_class"), [
    (400, openai.BadRequestError),
    (401, openai.AuthenticationError),
    (404, openai.NotFoundError),
    (429, openai.RateLimitError),
    (500, openai.InternalServerError),
    (503, openai.InternalServerError),
])
def test_upstream_errors_keep_their_status_and_message(openai_client: openai.OpenAI, text_model: str, status: int, error_class: type[openai.APIStatusError]) -> None:
    with pytest.raises(error_class) as error:
        openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": f"[error:{status}]"}])
    assert error.value.status_code == status
    assert error.value.message.endswith(f"fake upstream error {status}")
    assert isinstance(error.value.body, dict) and error.value.body["message"] == f"fake upstream error {status}"
    if status == 429:
        assert error.value.response.headers["retry-after"] == "7"
        assert error.value.type == "rate_limit_error"


def test_an_upstream_error_on_a_stream_is_an_http_error_not_a_broken_stream(openai_client: openai.OpenAI, text_model: str) -> None:
    with pytest.raises(openai.RateLimitError):
        openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "[error:429]"}], stream=True)


def test_a_stream_cut_by_the_upstream_ends_in_an_error_event(openai_client: openai.OpenAI, text_model: str) -> None:
    stream = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "[tokens:10] [cut:3]"}], stream=True)
    with pytest.raises(openai.APIError) as error:
        for _ in stream:
            pass
    assert "broke off" in error.value.message


def test_an_unknown_model_is_a_404_listing_the_models(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as error:
        openai_client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert error.value.code == "model_not_found" and error.value.param == "model"
    assert "fake/fake-model" in error.value.message


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "fake-model"}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": "fake-model", "messages": "hi"}, "messages"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tools": {"type": "function"}}, "tools"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools[0].function"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "sometimes",
      "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function"},
      "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice.function.name"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}}, "response_format.type"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}},
     "response_format.json_schema"),
    ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
      "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format.json_schema.name"),
])
def test_malformed_requests_are_400s_naming_the_parameter(openai_client: openai.OpenAI, body: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.post("/chat/completions", cast_to=object, body=body)
    assert error.value.param == param


@pytest.mark.parametrize("store", [False, True])
def test_a_body_cut_short_by_the_model_server_is_a_502(openai_client: openai.OpenAI, text_model: str, store: bool) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "[garbage] cut"}], store=store)
    assert error.value.status_code == 502 and error.value.code == "upstream_malformed"


@pytest.mark.parametrize("store", [False, True])
def test_a_malformed_chunk_in_a_stream_is_an_error_event_then_a_clean_end(openai_client: openai.OpenAI, text_model: str, store: bool) -> None:
    stream = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "[garbage] cut"}], store=store,
                                                   stream=True)
    received = []
    with pytest.raises(openai.APIError) as error:
        for chunk in stream:
            received.append(chunk)
    assert "malformed" in error.value.message and len(received) == 1  # the chunk before it went through
