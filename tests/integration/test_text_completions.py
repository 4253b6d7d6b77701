"""POST /v1/completions (the legacy completions API) through the openai SDK, server and library
modes, replayed upstream: a prompt continued as text, as vLLM, OGX and OpenAI's own older models
serve it."""

from __future__ import annotations

from typing import Any

import openai
import pytest


def test_a_prompt_is_continued_as_text(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.completions.create(model=text_model, prompt="Say hi")
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    assert completion.model == text_model
    [choice] = completion.choices
    assert choice.text == "You said: Say hi" and choice.index == 0 and choice.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 4


def test_the_clients_model_id_comes_back_when_the_upstream_knows_it_by_another(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.completions.create(model=f"fake/{text_model}", prompt="Say hi")
    assert completion.model == f"fake/{text_model}" and completion.choices[0].text == "You said: Say hi"
    chunks = list(openai_client.completions.create(model=f"fake/{text_model}", prompt="[tokens:2]", stream=True))
    assert {chunk.model for chunk in chunks} == {f"fake/{text_model}"}


def test_each_prompt_gets_n_choices_indexed_prompt_by_prompt(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.completions.create(model=text_model, prompt=["[tokens:1]", "[tokens:2]"], n=2)
    assert [(choice.index, choice.text) for choice in completion.choices] == [
        (0, "tok1"), (1, "tok1 (choice 1)"), (2, "tok1 tok2"), (3, "tok1 tok2 (choice 1)")]


def test_a_stream_carries_the_text_piece_by_piece_then_the_usage(openai_client: openai.OpenAI, text_model: str) -> None:
    chunks = list(openai_client.completions.create(model=text_model, prompt="[tokens:5]", stream=True,
                                                   stream_options={"include_usage": True}))
    assert {chunk.object for chunk in chunks} == {"text_completion"} and len({chunk.id for chunk in chunks}) == 1
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == "tok1 tok2 tok3 tok4 tok5"
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


async def test_the_async_client_streams_too(async_openai_client: openai.AsyncOpenAI, text_model: str) -> None:
    stream = await async_openai_client.completions.create(model=text_model, prompt="[tokens:3]", stream=True)
    assert [chunk.choices[0].text async for chunk in stream if chunk.choices and chunk.choices[0].text] == ["tok1", " tok2", " tok3"]


def test_max_tokens_stop_and_echo_shape_the_text(openai_client: openai.OpenAI, text_model: str) -> None:
    cut = openai_client.completions.create(model=text_model, prompt="[tokens:8]", max_tokens=3)
    assert cut.choices[0].text == "tok1 tok2 tok3" and cut.choices[0].finish_reason == "length"
    stopped = openai_client.completions.create(model=text_model, prompt="[tokens:8]", stop=[" tok4"])
    assert stopped.choices[0].text == "tok1 tok2 tok3" and stopped.choices[0].finish_reason == "stop"
    echoed = openai_client.completions.create(model=text_model, prompt="Once upon a time", echo=True)
    assert echoed.choices[0].text == "Once upon a timeYou said: Once upon a time"


def test_token_prompts_are_accepted(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.completions.create(model=text_model, prompt=[[15, 16], [17]])
    assert [choice.index for choice in completion.choices] == [0, 1]


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"prompt": None}, "prompt", "missing_required_parameter"),
    ({"prompt": []}, "prompt", "invalid_value"),
    ({"prompt": ["a", 5]}, "prompt", "invalid_value"),
    ({"prompt": "x", "n": 0}, "n", "integer_below_min_value"),
    ({"prompt": "x", "logprobs": 6}, "logprobs", "integer_above_max_value"),
    ({"prompt": "x", "max_tokens": -1}, "max_tokens", "integer_below_min_value"),
    ({"prompt": "x", "temperature": "hot"}, "temperature", "invalid_type"),
    ({"prompt": "x", "echo": "yes"}, "echo", "invalid_type"),
    ({"prompt": "x", "n": 3, "best_of": 2}, "best_of", "invalid_value"),
    ({"prompt": "x", "stream": True, "n": 1, "best_of": 2}, "best_of", "invalid_value"),
])
def test_a_mistake_is_a_400_naming_the_field(openai_client: openai.OpenAI, text_model: str, extra: dict[str, Any], param: str,
                                             code: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.post("/completions", cast_to=object, body={"model": text_model, **extra})
    assert refused.value.body["param"] == param and refused.value.body["code"] == code  # type: ignore[index]


def test_an_unknown_model_is_a_404_and_an_upstream_error_keeps_its_status(openai_client: openai.OpenAI, text_model: str) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.completions.create(model="no-such-model", prompt="x")
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.RateLimitError):
        openai_client.with_options(max_retries=0).completions.create(model=text_model, prompt="[error:429]")
    with pytest.raises(openai.RateLimitError):  # refused before the stream opens: a status, not a broken stream
        openai_client.with_options(max_retries=0).completions.create(model=text_model, prompt="[error:429]", stream=True)
