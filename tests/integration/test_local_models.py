"""The models that run in the server's own process (the `local` extra): a real 135M chat model and
static embeddings, driven through the openai SDK as a server and as a library. What a small model
says is not checked, only the shapes and the behaviour around it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from runtime.testing.targets import StackTarget, open_target

CONFIG = Path(__file__).with_name("local.yaml")
CHAT = "smollm2-135m-instruct"
EMBED = "wordllama-l2-supercat"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}

pytest.importorskip("llama_cpp", reason="the local extra (pip install -e '.[local]') is not installed")


@pytest.fixture(scope="module", params=["server", "library"])
def local(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackTarget]:
    env = {"STACK_STATE_DIR": str(tmp_path_factory.mktemp("local")), "STACK_RECORDING_MODE": "live"}
    import os

    with open_target(f"{request.param}:{CONFIG}", env={**os.environ, **env}) as target:
        yield target


@pytest.fixture
def client(local: StackTarget) -> Iterator[openai.OpenAI]:
    client = local.openai(max_retries=0, timeout=60)
    yield client
    client.close()


def test_both_models_are_listed_with_what_they_are(client: openai.OpenAI) -> None:
    models = {model.id: model for model in client.models.list()}
    assert {f"local/{CHAT}", f"local-embeddings/{EMBED}"} <= set(models)
    assert models[f"local-embeddings/{EMBED}"].model_dump()["dimensions"] == 256


def test_a_chat_answer_and_its_stream(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "What is the capital of France?"}],
                                            max_tokens=24, seed=7)
    choice = answer.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length") and answer.model == CHAT
    assert answer.usage is not None and answer.usage.prompt_tokens > 0 and 0 < answer.usage.completion_tokens <= 24
    chunks = list(client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.strip() and len({chunk.id for chunk in chunks}) == 1
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def _generated_tokens(choices: list[tuple[str | None, int]], limit: int) -> tuple[int, int]:
    """The least and most completion tokens `choices` (finish reason, tokens seen) can add up to:
    a choice cut at the limit has exactly `limit`, one that stopped at least what was seen."""
    low = sum(limit if finish == "length" else max(seen, 1) for finish, seen in choices)
    high = sum(limit if finish == "length" else limit - 1 for finish, _ in choices)
    return low, high


def test_n_choices_are_generated_each_with_its_index(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    one = client.chat.completions.create(model=CHAT, messages=messages, max_tokens=4)
    answer = client.chat.completions.create(model=CHAT, messages=messages, max_tokens=4, n=3, seed=11)
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    assert all(choice.message.content and choice.finish_reason in ("stop", "length") for choice in answer.choices)
    assert answer.usage is not None and one.usage is not None
    assert answer.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once
    low, high = _generated_tokens([(choice.finish_reason, 1) for choice in answer.choices], 4)
    assert low <= answer.usage.completion_tokens <= high  # every choice's tokens, not the first's alone
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_a_stream_of_n_choices_and_its_usage(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    whole = client.chat.completions.create(model=CHAT, messages=messages, max_tokens=5)
    chunks = list(client.chat.completions.create(model=CHAT, messages=messages, max_tokens=5, n=2, stream=True,
                                                 stream_options={"include_usage": True}))
    assert len({chunk.id for chunk in chunks}) == 1
    by_index: dict[int, list[Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            by_index.setdefault(choice.index, []).append(choice)
    assert sorted(by_index) == [0, 1]
    for choices in by_index.values():
        assert choices[0].delta.role == "assistant" and choices[-1].finish_reason in ("stop", "length")
        assert "".join(choice.delta.content or "" for choice in choices).strip()
    usage = chunks[-1].usage
    assert usage is not None and whole.usage is not None and not chunks[-1].choices
    assert usage.prompt_tokens == whole.usage.prompt_tokens  # counted through the chat template, as a whole answer's is
    seen = [(choices[-1].finish_reason, sum(1 for choice in choices if choice.delta.content)) for choices in by_index.values()]
    low, high = _generated_tokens(seen, 5)
    assert low <= usage.completion_tokens <= high


@pytest.mark.parametrize(("extra", "param"), [
    ({"logprobs": True}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 3, "stream": True}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
])
def test_what_the_model_cannot_give_is_refused_not_ignored(client: openai.OpenAI, extra: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=4, **extra)  # type: ignore[call-overload]
    assert refused.value.body == {"message": f"Unsupported parameter: '{param}' is not supported with this model.",
                                  "type": "invalid_request_error", "param": param, "code": "unsupported_parameter"}
    assert client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                          logprobs=False).choices[0].message.content is not None


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}},
])
def test_a_part_the_model_cannot_read_is_refused(client: openai.OpenAI, part: dict[str, Any]) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=CHAT, messages=messages, max_tokens=4)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "messages.[1].content.[1].type"  # type: ignore[index]
    assert refused.value.body["code"] == "unsupported_value" and part["type"] in refused.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="image_url is not supported with this model"):
        client.responses.create(model=CHAT, max_output_tokens=16, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": "https://example.com/a.png"}]}])


def test_a_prompt_over_the_context_is_a_400_and_truncation_auto_fits_it(client: openai.OpenAI) -> None:
    long = "word " * 3000  # about 3,000 tokens, over local.yaml's 2,048
    expected = {"type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            answer = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": long}], max_tokens=4, stream=stream)
            list(answer) if stream else None  # type: ignore[call-overload]
        body = refused.value.body
        assert isinstance(body, dict) and {key: body[key] for key in expected} == expected
        assert body["message"].startswith("This model's maximum context length is 2048 tokens. However, your messages resulted in ")
    with pytest.raises(openai.BadRequestError, match="maximum context length is 2048 tokens") as whole:
        client.responses.create(model=CHAT, input=long, max_output_tokens=16)
    assert whole.value.param == "input"  # the Responses request's name for what the model server calls `messages`
    with pytest.raises(openai.BadRequestError, match="maximum context length is 2048 tokens") as streamed:  # streamed: the same 400
        list(client.responses.create(model=CHAT, input=long, max_output_tokens=16, stream=True))
    assert streamed.value.code == "context_length_exceeded" and streamed.value.param == "input"
    fitted = client.responses.create(model=CHAT, max_output_tokens=16, truncation="auto", input=[
        {"role": "user", "content": long}, {"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Say hi."}])
    assert fitted.status in ("completed", "incomplete") and fitted.usage is not None and fitted.usage.input_tokens < 2048


def test_a_prompt_is_continued_whole_or_streamed_with_the_same_usage(client: openai.OpenAI) -> None:
    prompt = "The capital of France is"
    whole = client.completions.create(model=CHAT, prompt=prompt, max_tokens=6, seed=3, temperature=0)
    [choice] = whole.choices
    assert whole.object == "text_completion" and whole.model == CHAT and choice.text and choice.finish_reason in ("stop", "length")
    assert whole.usage is not None and whole.usage.prompt_tokens > 0 and 0 < whole.usage.completion_tokens <= 6
    chunks = list(client.completions.create(model=CHAT, prompt=prompt, max_tokens=6, seed=3, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == choice.text  # greedy: the same text
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole.usage.prompt_tokens, whole.usage.completion_tokens)


def test_prompts_times_n_choices_echo_and_no_tokens(client: openai.OpenAI) -> None:
    answer = client.completions.create(model=CHAT, prompt=["Once upon a time", "In a galaxy"], n=2, max_tokens=3, seed=5)
    assert [choice.index for choice in answer.choices] == [0, 1, 2, 3]
    one = client.completions.create(model=CHAT, prompt="Once upon a time", max_tokens=3)
    other = client.completions.create(model=CHAT, prompt="In a galaxy", max_tokens=3)
    assert answer.usage is not None and one.usage is not None and other.usage is not None
    assert answer.usage.prompt_tokens == one.usage.prompt_tokens + other.usage.prompt_tokens  # each prompt once, not n times
    echoed = client.completions.create(model=CHAT, prompt="Once upon a time", max_tokens=2, echo=True)
    assert echoed.choices[0].text.startswith("Once upon a time")
    nothing = client.completions.create(model=CHAT, prompt="Once upon a time", max_tokens=0, echo=True)
    assert nothing.choices[0].text == "Once upon a time" and nothing.choices[0].finish_reason == "length"
    assert nothing.usage is not None and nothing.usage.completion_tokens == 0 and nothing.usage.prompt_tokens == one.usage.prompt_tokens


@pytest.mark.parametrize(("extra", "param"), [({"logprobs": 2}, "logprobs"), ({"suffix": " the end."}, "suffix"),
                                              ({"best_of": 2}, "best_of")])
def test_what_a_completion_cannot_give_is_refused(client: openai.OpenAI, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=CHAT, prompt="Once", max_tokens=2, **extra)
    assert refused.value.body["param"] == param and refused.value.body["code"] == "unsupported_parameter"  # type: ignore[index]


def test_a_prompt_over_the_context_is_a_400_streamed_or_not(client: openai.OpenAI) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            answer = client.completions.create(model=CHAT, prompt="word " * 3000, max_tokens=4, stream=stream)
            list(answer) if stream else None  # type: ignore[call-overload]
        body = refused.value.body
        assert isinstance(body, dict) and body["code"] == "context_length_exceeded" and body["param"] == "prompt"
        assert body["message"].startswith("This model's maximum context length is 2048 tokens. However, your prompt resulted in ")


def test_the_embedding_model_serves_no_completions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=EMBED, prompt="Once")
    assert refused.value.body["code"] == "unsupported_model" and "chat completions" not in refused.value.body["message"]  # type: ignore[index]


def test_json_schema_output_always_parses_and_validates(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    answer = client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Give a city and its population as JSON."}], max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
    value = json.loads(answer.choices[0].message.content or "")
    assert set(value) == {"city", "population"} and isinstance(value["city"], str) and isinstance(value["population"], int)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_tool_call_is_well_formed(client: openai.OpenAI, choice: object) -> None:
    answer = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
                                            tool_choice=choice, max_tokens=64)  # type: ignore[arg-type]
    choice_ = answer.choices[0]
    assert choice_.finish_reason == "tool_calls" and choice_.message.content is None
    [call] = choice_.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert set(arguments) == {"city", "unit"} and isinstance(arguments["city"], str) and arguments["unit"] in ("celsius", "fahrenheit")


def test_a_call_cut_off_by_the_token_limit_is_not_shown_as_text(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "Weather in Paris?"}]
    answer = client.chat.completions.create(model=CHAT, messages=messages, tools=[WEATHER], tool_choice="required", max_tokens=5)
    assert answer.choices[0].finish_reason == "length"
    assert answer.choices[0].message.content is None and not answer.choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(model=CHAT, messages=messages, tools=[WEATHER], tool_choice="required", max_tokens=5,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    response = client.responses.create(model=CHAT, input="Weather in Paris?", tool_choice="required", max_output_tokens=16, tools=[
        {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}])  # type: ignore[index]
    assert response.status == "incomplete" and "tool_call" not in response.output_text


def test_a_schema_the_grammar_cannot_follow_is_a_400_not_ignored(client: openai.OpenAI) -> None:
    broken: Any = {"type": "object", "properties": {"city": {"$ref": "#/definitions/missing"}}}
    with pytest.raises(openai.BadRequestError) as tools:
        client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": broken}}])
    assert (tools.value.body["param"], tools.value.body["code"]) == ("tools", "invalid_function_parameters")  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as formatted:  # the binding alone would answer any JSON instead
        client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=4, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": broken}})
    assert formatted.value.body["param"] == "response_format.json_schema.schema"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as in_responses:  # named as the Responses request names it
        client.responses.create(model=CHAT, input="hi", max_output_tokens=16, text={
            "format": {"type": "json_schema", "name": "x", "schema": broken}})
    assert in_responses.value.body["param"] == "text.format.schema"  # type: ignore[index]


def test_with_tool_choice_auto_the_answer_is_text_or_a_well_formed_call(client: openai.OpenAI) -> None:
    for question in ("Weather in Oslo?", "Tell me a joke."):
        answer = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": question}], tools=[WEATHER],
                                                max_tokens=64)
        message = answer.choices[0].message
        if message.tool_calls:
            assert answer.choices[0].finish_reason == "tool_calls" and message.content is None
            assert set(json.loads(message.tool_calls[0].function.arguments)) == {"city", "unit"}  # type: ignore[union-attr]
        else:
            assert isinstance(message.content, str) and not message.content.lstrip().startswith("<tool_call>")


def test_a_responses_round_trip_with_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(model=CHAT, input="My name is Ada.", max_output_tokens=24)
    second = client.responses.create(model=CHAT, input="What is my name?", previous_response_id=first.id, max_output_tokens=24)
    for response in (first, second):
        assert response.status in ("completed", "incomplete") and response.output_text.strip()
    assert second.usage is not None and first.usage is not None and second.usage.input_tokens > first.usage.input_tokens
    events = list(client.responses.create(model=CHAT, input="Count to three.", max_output_tokens=16, stream=True))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")


def test_a_cancelled_stream_frees_the_model_for_the_next_request(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Write a long story."}],
                                            max_tokens=2000, stream=True)
    for _ in zip(range(3), stream):
        pass
    stream.close()
    started = time.monotonic()
    answer = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert answer.choices[0].message.content is not None
    assert time.monotonic() - started < 1.0, "the abandoned generation still held the model"


def test_while_the_model_works_the_rest_of_the_server_answers_at_once(client: openai.OpenAI, local: StackTarget) -> None:
    results: list[object] = []

    def ask() -> None:
        results.append(client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Tell me about the sea."}],
                                                      max_tokens=48))

    askers = [threading.Thread(target=ask) for _ in range(3)]
    for asker in askers:
        asker.start()
    time.sleep(0.2)
    started = time.monotonic()
    conversation = client.conversations.create()
    assert client.get("/health", cast_to=httpx2.Response).status_code == 200
    assert time.monotonic() - started < 0.5 and conversation.id.startswith("conv_")
    for asker in askers:
        asker.join(60)
    assert len(results) == 3  # queued, not refused


def test_embeddings_have_the_models_dimensions_and_meaning(client: openai.OpenAI) -> None:
    sentences = ["The cat sat on the mat.", "A cat was sitting on the rug.", "Quarterly revenue rose by eight percent."]
    result = client.embeddings.create(model=EMBED, input=sentences)
    vectors = [item.embedding for item in result.data]
    assert [len(vector) for vector in vectors] == [256] * 3

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))  # unit vectors

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    short = client.embeddings.create(model=EMBED, input="hello", dimensions=64)
    assert len(short.data[0].embedding) == 64


# Twenty requests for structured output, varied in shape (nested objects, arrays, enums, optional
# fields, numbers) and asked both ways (Chat Completions and Responses; json_schema and json_object).
STRUCTURED: list[tuple[str, dict[str, Any] | None]] = [
    ("What is the capital of France? Answer with the city.", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    ("Give a person's name and age.", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                                       "required": ["name", "age"]}),
    ("List three colors.", {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"}}}, "required": ["colors"]}),
    ("Is the sky blue? Say why.", {"type": "object", "properties": {"answer": {"type": "boolean"}, "reason": {"type": "string"}},
                                   "required": ["answer", "reason"]}),
    ("Describe a cat in one sentence.", {"type": "object", "properties": {"description": {"type": "string"}}, "required": ["description"]}),
    ("Write a short poem about the sea.", {"type": "object", "properties": {"title": {"type": "string"}, "lines": {
        "type": "array", "items": {"type": "string"}}}, "required": ["title", "lines"]}),
    ("Name a fruit and its color.", {"type": "object", "properties": {"fruit": {"type": "string"}, "color": {
        "type": "string", "enum": ["red", "green", "yellow", "orange", "purple"]}}, "required": ["fruit", "color"], "additionalProperties": False}),
    ("Give the temperature in Paris today.", {"type": "object", "properties": {"celsius": {"type": "number"}}, "required": ["celsius"]}),
    ("Plan a trip: a city and three things to do there.", {"type": "object", "properties": {"city": {"type": "string"}, "activities": {
        "type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "hours": {"type": "integer"}},
                                   "required": ["name", "hours"]}}}, "required": ["city", "activities"]}),
    ("Give a book's title, author and year.", {"type": "object", "properties": {"title": {"type": "string"}, "author": {"type": "string"},
                                                                               "year": {"type": "integer"}}, "required": ["title", "author", "year"]}),
    ("Summarize: the meeting moved to Friday at noon.", {"type": "object", "properties": {"day": {"type": "string"}, "time": {"type": "string"},
                                                                                          "note": {"type": ["string", "null"]}}, "required": ["day", "time"]}),
    ("Classify the sentiment of: I love this phone.", {"type": "object", "properties": {"sentiment": {
        "type": "string", "enum": ["positive", "negative", "neutral"]}, "confidence": {"type": "number"}}, "required": ["sentiment"]}),
    ("Give an address with a street, a city and a postal code.", {"type": "object", "properties": {"address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "postal_code": {"type": "string"}}, "required": ["street", "city"]}},
        "required": ["address"]}),
    ("List the first five prime numbers.", {"type": "object", "properties": {"primes": {"type": "array", "items": {"type": "integer"}}},
                                            "required": ["primes"]}),
    ("Tell me a joke with its setup and punchline.", {"type": "object", "properties": {"setup": {"type": "string"}, "punchline": {"type": "string"}},
                                                      "required": ["setup", "punchline"]}),
    ("Give a recipe's name and its ingredients.", None),
    ("Describe the weather today.", None),
    ("What are three uses of water?", None),
    ("Give a user profile with a username and interests.", None),
    ("Translate 'hello' to French, Spanish and German.", None),
]


def test_structured_output_parses_every_time(client: openai.OpenAI, local: StackTarget) -> None:
    """Twenty requests, every answer parses (and fits its schema's shape): the grammar holds strings
    to JSON (no raw newline runs on to the token limit) and bounds what the schema leaves open."""
    if local.mode == "library":
        pytest.skip("what the model writes is the same through either transport: asked once, of the server")
    for index, (question, schema) in enumerate(STRUCTURED):
        messages: Any = [{"role": "user", "content": question + ("" if schema else " Answer in JSON.")}]
        if index % 4 == 3 and schema is not None:  # some through Responses, as text.format
            response = client.responses.create(model=CHAT, input=question, text={"format": {"type": "json_schema", "name": "answer",
                                                                                            "schema": schema}})
            assert response.status == "completed", (question, response.output_text)
            text = response.output_text
        else:
            response_format: Any = ({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}} if schema
                                    else {"type": "json_object"})
            answer = client.chat.completions.create(model=CHAT, messages=messages, response_format=response_format)
            assert answer.choices[0].finish_reason == "stop", (question, answer.choices[0].message.content)
            text = answer.choices[0].message.content or ""
        value = json.loads(text)
        assert isinstance(value, dict), (question, text)
        assert schema is None or set(schema.get("required", ())) <= set(value), (question, text)


def test_a_function_round_trip_ends_in_text_without_the_models_call_markup(client: openai.OpenAI) -> None:
    """The follow-up that carries the call's output offers no tools: the model, shown its own call
    in the history, would write the markup again as its answer."""
    function = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}  # type: ignore[index]
    first = client.responses.create(model=CHAT, input="What is the weather in Paris?", tools=[function], tool_choice="required",  # type: ignore[list-item]
                                    max_output_tokens=64)
    [call] = [item for item in first.output if item.type == "function_call"]
    for stream in (False, True):
        follow_up: Any = client.responses.create(model=CHAT, previous_response_id=first.id, max_output_tokens=96, stream=stream, input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 18, "sky": "clear"}'}])  # type: ignore[union-attr]
        text = follow_up.output_text if not stream else "".join(event.delta for event in follow_up if event.type == "response.output_text.delta")
        assert "<tool_call>" not in text and "</tool_call>" not in text, text


def test_an_error_about_the_model_names_it_as_the_client_did(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=f"local/{CHAT}", input="hello")
    assert f"'local/{CHAT}'" in refused.value.body["message"] and refused.value.body["param"] == "model"  # type: ignore[index]
