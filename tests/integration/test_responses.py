"""The Responses API through the openai SDK, in server and library modes, upstream replayed."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served

WEATHER: Any = {
    "type": "function", "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_a_plain_response(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input="Hello there")
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "completed"
    assert response.output_text == "You said: Hello there"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert response.usage is not None and response.usage.input_tokens == 2 and response.usage.output_tokens == 4
    assert response.model == text_model and response.store is True and response.completed_at is not None


def test_a_stored_response_is_retrieved_as_it_was_returned(openai_client: openai.OpenAI, text_model: str) -> None:
    created = openai_client.responses.create(model=text_model, input="Keep me", metadata={"k": "v"}, temperature=0.5)
    retrieved = openai_client.responses.retrieve(created.id)
    assert retrieved.model_dump() == created.model_dump()
    assert retrieved.metadata == {"k": "v"} and retrieved.temperature == 0.5


TEXT_EVENTS = [
    "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
    "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
    "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed",
]


def test_a_stream_emits_the_openai_events_in_order(openai_client: openai.OpenAI, text_model: str) -> None:
    events = list(openai_client.responses.create(model=text_model, input="[tokens:3]", stream=True))
    assert [event.type for event in events] == TEXT_EVENTS
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas == ["tok1", " tok2", " tok3"]
    created, completed = events[0], events[-1]
    assert created.response.status == "in_progress" and created.response.output == []
    assert completed.response.id == created.response.id and completed.response.output_text == "tok1 tok2 tok3"
    # An extra OGX's clients read (OpenAI's SDK keeps unknown fields as attributes).
    parts = [event for event in events if event.type.startswith("response.content_part.")]
    assert [getattr(event, "response_id", None) for event in parts] == [created.response.id] * 2


def test_the_sdk_stream_helper_final_response_equals_the_stored_one(openai_client: openai.OpenAI, text_model: str) -> None:
    with openai_client.responses.stream(model=text_model, input="[tokens:4] helper") as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "tok1 tok2 tok3 tok4"
    stored = openai_client.responses.retrieve(final.id)
    # The helper parses output into its own subclasses (adding `parsed: None`); the data must match.
    assert [item.model_dump(exclude_none=True) for item in stored.output] == [item.model_dump(exclude_none=True) for item in final.output]
    assert stored.status == final.status == "completed"


def test_previous_response_id_carries_the_conversation(openai_client: openai.OpenAI, text_model: str) -> None:
    first = openai_client.responses.create(model=text_model, input="My name is Ada", instructions="Be terse")
    second = openai_client.responses.create(model=text_model, input="What is my name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.instructions is None  # instructions are not carried over
    # The upstream counted the first turn's input and output in the second turn's prompt.
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens == 4 + 6 + 4
    items = openai_client.responses.input_items.list(second.id)
    assert [item.type for item in items.data] == ["message"]  # only this turn's input


def test_a_chain_can_branch_from_an_older_response(openai_client: openai.OpenAI, text_model: str) -> None:
    root = openai_client.responses.create(model=text_model, input="root")
    openai_client.responses.create(model=text_model, input="left", previous_response_id=root.id)
    right = openai_client.responses.create(model=text_model, input="right", previous_response_id=root.id)
    assert right.usage is not None and right.usage.input_tokens == 1 + 3 + 1


def test_function_calls_round_trip_with_previous_response_id(openai_client: openai.OpenAI, text_model: str) -> None:
    first = openai_client.responses.create(model=text_model, input='Weather? [tool:get_weather {"city": "Paris"}]', tools=[WEATHER])
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    second = openai_client.responses.create(
        model=text_model, previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.output_text == "Tool result: sunny"


def test_streamed_function_call_events(openai_client: openai.OpenAI, text_model: str) -> None:
    events = list(openai_client.responses.create(
        model=text_model, input='[tool:get_weather {"city": "Oslo"}]', tools=[WEATHER], stream=True))
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    done = next(event for event in events if event.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Oslo"}


def test_a_full_history_in_input_is_accepted(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, tools=[WEATHER], input=[
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Rome?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
    ])
    assert response.output_text == "Tool result: rain"


def test_store_false_is_not_retrievable_nor_chainable(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input="ephemeral", store=False)
    assert response.store is False and response.output_text == "You said: ephemeral"
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.responses.create(model=text_model, input="next", previous_response_id=response.id)
    assert error.value.param == "previous_response_id"
    assert "Only stored responses" in error.value.message


def test_max_output_tokens_makes_an_incomplete_response(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input="[tokens:30]", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    events = list(openai_client.responses.create(model=text_model, input="[tokens:30]", max_output_tokens=16, stream=True))
    assert events[-1].type == "response.incomplete"
    assert sum(event.type == "response.completed" for event in events) == 0


class Answer(BaseModel):
    answer: str


def test_structured_output_with_a_json_schema(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.parse(model=text_model, input="structured", text_format=Answer)
    assert response.output_parsed == Answer(answer="You said: structured")


def test_reasoning_text_becomes_a_reasoning_item(openai_client: openai.OpenAI, reasoning_model: str) -> None:
    response = openai_client.responses.create(model=reasoning_model, input="Think", reasoning={"effort": "low"})
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "Thinking about it."
    assert message.type == "message" and response.output_text == "You said: Think"
    events = list(openai_client.responses.create(model=reasoning_model, input="Think", stream=True))
    kinds = [event.type for event in events]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")


def test_a_refusal_is_a_refusal_part(openai_client: openai.OpenAI, text_model: str) -> None:
    events = list(openai_client.responses.create(model=text_model, input="[refusal]", stream=True))
    kinds = [event.type for event in events]
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    final = events[-1].response
    assert final.output[0].content[0].type == "refusal"


def test_logprobs_are_included_when_asked(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input="odds", top_logprobs=2, include=["message.output_text.logprobs"])
    part = response.output[0].content[0]
    assert part.type == "output_text" and part.logprobs and part.logprobs[0].top_logprobs


def test_tool_choice_none_and_allowed_tools(openai_client: openai.OpenAI, text_model: str) -> None:
    none = openai_client.responses.create(model=text_model, input='[tool:get_weather {"city": "Oslo"}]', tools=[WEATHER], tool_choice="none")
    assert none.output[0].type == "message"
    allowed = openai_client.responses.create(
        model=text_model, input='[tool:get_weather {"city": "Oslo"}]', tools=[WEATHER],
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]},
    )
    assert allowed.output[0].type == "function_call"
    assert allowed.tool_choice.type == "allowed_tools"  # type: ignore[union-attr]


def test_upstream_failure_fails_the_response(openai_client: openai.OpenAI, text_model: str) -> None:
    with pytest.raises(openai.InternalServerError):
        openai_client.responses.create(model=text_model, input="[error:500]")
    with pytest.raises(openai.InternalServerError, match="fake upstream error 503"):  # streamed, before any output: the same
        list(openai_client.responses.create(model=text_model, input="[error:503]", stream=True))
    events = list(openai_client.responses.create(model=text_model, input="[error:503]", stream=True, background=True))
    assert events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None and "fake upstream error 503" in failed.error.message
    assert failed.error.code == "server_error"  # a code of the Responses API's closed set
    assert openai_client.responses.retrieve(failed.id).status == "failed"


@pytest.mark.parametrize(("status", "code"), [(429, "rate_limit_exceeded"), (400, "invalid_prompt"), (502, "server_error")])
def test_a_failed_response_carries_a_responses_api_error_code(openai_client: openai.OpenAI, text_model: str, status: int, code: str) -> None:
    # A background response: accepted first, so a failure of its model call is the response's.
    events = list(openai_client.responses.create(model=text_model, input=f"[error:{status}]", stream=True, background=True))
    assert events[0].type == "response.created" and events[-1].type == "response.failed"
    error = events[-1].response.error
    assert error is not None and error.code == code and f"fake upstream error {status}" in error.message


@pytest.mark.parametrize("status", [429, 400, 502])
def test_a_stream_refused_before_any_output_is_that_error_as_when_not_streamed(openai_client: openai.OpenAI, text_model: str,
                                                                              status: int) -> None:
    before = openai_client.get("/responses", cast_to=object, options={"params": {"limit": 1}})["data"]  # type: ignore[index]
    with pytest.raises(openai.APIStatusError) as refused:
        list(openai_client.responses.create(model=text_model, input=f"[error:{status}]", stream=True))
    assert refused.value.status_code == status and f"fake upstream error {status}" in refused.value.message
    assert openai_client.get("/responses", cast_to=object, options={"params": {"limit": 1}})["data"] == before  # type: ignore[index]


def test_a_stream_cut_by_the_upstream_keeps_the_partial_output(openai_client: openai.OpenAI, text_model: str) -> None:
    events = list(openai_client.responses.create(model=text_model, input="[tokens:10] [cut:4]", stream=True))
    assert events[-1].type == "response.failed"
    stored = openai_client.responses.retrieve(events[-1].response.id)
    assert stored.status == "failed" and stored.error is not None and stored.error.code == "server_error"
    assert stored.output and stored.output[0].status == "incomplete"
    assert stored.output_text.startswith("tok1")


def test_truncation_auto_drops_the_oldest_items_when_the_context_overflows(openai_client: openai.OpenAI, text_model: str) -> None:
    history = [{"role": "user", "content": f"old message {i} " + "x" * 4000} for i in range(8)]
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.responses.create(model=text_model, input=[*history, {"role": "user", "content": "latest"}])
    assert error.value.code == "context_length_exceeded"
    response = openai_client.responses.create(model=text_model, input=[*history, {"role": "user", "content": "latest"}], truncation="auto")
    assert response.status == "completed" and response.output_text == "You said: latest"


def test_a_streamed_request_the_model_server_refuses_is_that_error_and_nothing_is_kept(openai_client: openai.OpenAI,
                                                                                       text_model: str) -> None:
    history = [{"role": "user", "content": f"old message {i} " + "x" * 4000} for i in range(8)]
    before = openai_client.get("/responses", cast_to=object, options={"params": {"limit": 1}})["data"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.responses.create(model=text_model, input=[*history, {"role": "user", "content": "latest"}], stream=True)
    assert error.value.code == "context_length_exceeded"  # as OpenAI answers it, not a stream ending in response.failed
    after = openai_client.get("/responses", cast_to=object, options={"params": {"limit": 1}})["data"]  # type: ignore[index]
    assert after == before
    events = list(openai_client.responses.create(model=text_model, input="[tokens:2] fine", stream=True))
    assert [event.type for event in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed"


def test_delete_list_and_input_items(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=[
        {"role": "user", "content": f"part {i}"} for i in range(5)])
    items = list(openai_client.responses.input_items.list(response.id, limit=2, order="asc"))
    assert [item.content[0].text for item in items] == [f"part {i}" for i in range(5)]  # type: ignore[union-attr]
    newest_first = openai_client.responses.input_items.list(response.id, limit=2)
    assert newest_first.data[0].content[0].text == "part 4"  # type: ignore[union-attr]
    listed = openai_client.get("/responses", cast_to=object, options={"params": {"limit": 1}})
    assert listed["data"][0]["id"] == response.id  # type: ignore[index]
    openai_client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(response.id)


def test_item_references_resolve_to_stored_items(openai_client: openai.OpenAI, text_model: str) -> None:
    first = openai_client.responses.create(model=text_model, input="referenced")
    second = openai_client.responses.create(model=text_model, input=[
        {"type": "item_reference", "id": first.output[0].id}, {"role": "user", "content": "and now"}])
    assert second.usage is not None and second.usage.input_tokens == 3 + 2  # "You said: referenced" + "and now"


def test_only_a_background_response_can_be_streamed_again(openai_client: openai.OpenAI, text_model: str) -> None:
    """A plain response keeps no event log: OpenAI refuses to stream it again, and so do we,
    rather than invent events a client might resume from."""
    response = openai_client.responses.create(model=text_model, input="[tokens:3] replay")
    with pytest.raises(openai.BadRequestError) as refused:
        list(openai_client.responses.retrieve(response.id, stream=True))
    assert refused.value.status_code == 400 and refused.value.param == "stream"
    assert "background=true" in refused.value.message


def test_input_tokens_are_counted_by_the_model(openai_client: openai.OpenAI, text_model: str) -> None:
    counted = openai_client.responses.input_tokens.count(model=text_model, input="count these four words")
    assert counted.input_tokens == 4


@pytest.mark.parametrize(("kwargs", "error_class", "param"), [
    ({"model": "nope", "input": "x"}, openai.NotFoundError, "model"),
    ({"input": "x", "previous_response_id": "resp_missing"}, openai.BadRequestError, "previous_response_id"),
    ({"input": "x", "previous_response_id": "resp_x", "conversation": "conv_x"}, openai.BadRequestError, "conversation"),
    ({"input": [{"type": "bogus"}]}, openai.BadRequestError, "input[0].type"),
    ({"input": []}, openai.BadRequestError, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,@@not base64@@"}]}]},
     openai.BadRequestError, "input[0].content[0].image_url"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "ftp://example.com/a.png"}]}]},
     openai.BadRequestError, "input[0].content[0].image_url"),
    ({"instructions": "Be brief."}, openai.BadRequestError, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, openai.BadRequestError, "input[0].content[0].text"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "bad name!", "schema": {}}}}, openai.BadRequestError, "text.format.name"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "ok", "schema": "not a schema"}}}, openai.BadRequestError, "text.format.schema"),
    ({"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, openai.BadRequestError, "metadata"),
    ({"input": "x", "temperature": 3}, openai.BadRequestError, "temperature"),
    ({"input": "x", "tools": [{"type": "function"}]}, openai.BadRequestError, "tools[0].name"),
    ({"input": "x", "max_output_tokens": 15}, openai.BadRequestError, "max_output_tokens"),  # OpenAI's minimum is 16
    ({"input": "x", "max_tool_calls": 0}, openai.BadRequestError, "max_tool_calls"),  # OpenAI's minimum is 1
    ({"input": "x", "include": ["message.output_text.logprobs", "everything"]}, openai.BadRequestError, "include[1]"),
    ({"input": "x", "previous_response_id": "not-a-response-id"}, openai.BadRequestError, "previous_response_id"),
    ({"input": "x", "conversation": "invalid-format-no-conv-prefix"}, openai.BadRequestError, "conversation"),
    ({"input": "x", "tool_choice": "invalid_choice"}, openai.BadRequestError, "tool_choice"),
    ({"input": "x", "tool_choice": {"type": "bogus"}}, openai.BadRequestError, "tool_choice.type"),
    ({"input": "x", "tool_choice": {"type": "function", "name": "absent"},
      "tools": [{"type": "function", "name": "present", "parameters": {"type": "object"}}]}, openai.BadRequestError, "tool_choice"),
])
def test_client_mistakes_are_4xx_naming_the_field(
    openai_client: openai.OpenAI, text_model: str, kwargs: dict[str, Any], error_class: type[openai.APIStatusError], param: str
) -> None:
    kwargs.setdefault("model", text_model)
    with pytest.raises(error_class) as error:
        openai_client.responses.create(**kwargs)
    assert error.value.param == param
    assert isinstance(error.value.body, dict) and set(error.value.body) == {"message", "type", "param", "code"}


def test_fifty_chained_turns(openai_client: openai.OpenAI, text_model: str) -> None:
    previous: str | None = None
    for turn in range(50):
        response = openai_client.responses.create(model=text_model, input=f"turn {turn}", previous_response_id=previous)
        assert response.output_text == f"You said: turn {turn}"
        previous = response.id
    assert response.usage is not None and response.usage.input_tokens == 50 * 2 + 49 * 4


async def test_fifty_parallel_streams_are_all_stored_complete(async_openai_client: openai.AsyncOpenAI, text_model: str) -> None:
    import asyncio

    async def one(index: int) -> tuple[str, str]:
        stream = await async_openai_client.responses.create(model=text_model, input=f"[tokens:8] parallel {index}", stream=True)
        events = [event async for event in stream]
        assert events[-1].type == "response.completed"
        return events[-1].response.id, events[-1].response.output_text

    results = await asyncio.gather(*(one(index) for index in range(50)))
    for response_id, text in results:
        stored = await async_openai_client.responses.retrieve(response_id)
        assert stored.status == "completed" and stored.output_text == text == "tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8"


def test_error_messages_say_what_openai_says(openai_client: openai.OpenAI, text_model: str) -> None:
    """Clients and conformance suites match on these words."""
    with pytest.raises(openai.BadRequestError) as both:
        openai_client.responses.create(model=text_model, input="x", previous_response_id="resp_x", conversation="conv_x")
    assert "Mutually exclusive parameters" in both.value.message
    with pytest.raises(openai.BadRequestError) as prefix:
        openai_client.responses.create(model=text_model, input="x", conversation="nope")
    assert "Expected an ID that begins with 'conv'" in prefix.value.message
    with pytest.raises(openai.BadRequestError) as choice:
        openai_client.responses.create(model=text_model, input="x", tool_choice="invalid_choice")  # type: ignore[arg-type]
    assert "tool_choice" in str(choice.value)


def test_an_id_that_is_not_a_response_id_is_a_400(openai_client: openai.OpenAI) -> None:
    for call in (lambda: openai_client.responses.retrieve("bad-id"), lambda: openai_client.responses.delete("bad-id"),
                 lambda: openai_client.responses.cancel("bad-id"), lambda: openai_client.responses.input_items.list("bad-id")):
        with pytest.raises(openai.BadRequestError) as error:
            call()
        assert error.value.param == "response_id" and "Expected an ID that begins with 'resp'" in error.value.message


def test_a_malformed_answer_from_the_model_server_is_a_502(openai_client: openai.OpenAI, text_model: str) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.responses.create(model=text_model, input="[garbage] broken body")
    assert error.value.status_code == 502 and error.value.code == "upstream_malformed"


def test_a_malformed_chunk_fails_the_streamed_response_and_is_stored_failed(openai_client: openai.OpenAI, text_model: str) -> None:
    # Before any output (the fake's second chunk), a stream is refused with the error itself...
    with pytest.raises(openai.APIStatusError, match="malformed") as refused:
        list(openai_client.responses.create(model=text_model, input="[garbage] [tokens:4] broken stream", stream=True))
    assert refused.value.status_code == 502
    # ...and a response already accepted (background) is stored failed, not cancelled, not in_progress.
    events = list(openai_client.responses.create(model=text_model, input="[garbage] [tokens:4] broken stream", stream=True,
                                                 background=True))
    final = events[-1]
    assert final.type == "response.failed" and final.response.status == "failed"
    assert final.response.error is not None and final.response.error.code == "server_error"
    assert "malformed" in final.response.error.message
    assert openai_client.responses.retrieve(final.response.id).status == "failed"


@pytest.mark.parametrize(("url", "code"), [
    ("data:image/png;base64,@@not base64@@", "invalid_base64_image"),
    ("data:image/png;base64,", "empty_image_file"),
    ("data:application/pdf;base64,JVBERi0=", "unsupported_image_media_type"),
    ("data:image/png,rawbytes", "invalid_image_url"),
    ("file:///etc/passwd", "invalid_image_url"),
])
def test_image_urls_the_model_cannot_take_get_openais_codes(openai_client: openai.OpenAI, text_model: str, url: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.responses.create(model=text_model, input=[{"role": "user", "content": [{"type": "input_image", "image_url": url}]}])
    assert (refused.value.code, refused.value.param) == (code, "input[0].content[0].image_url")


@pytest.fixture(scope="module", params=["server", "library"])
def vision_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A stack in front of the fake upstream, which words image failures as vLLM does."""
    with running_fake_upstream() as upstream:
        with served(request.param, run_yaml(tmp_path_factory.mktemp("vision"), upstream.base_url, name="vision")) as client:
            yield client


PNG_HEADER_ONLY = "data:image/png;base64,iVBORw0KGgo="
NOT_AN_IMAGE = "data:image/png;base64," + base64.b64encode(b"these bytes are text, not a picture").decode()


@pytest.mark.parametrize(("url", "code"), [
    ("https://unreachable.invalid/cat.png", "failed_to_download_image"),  # vLLM: a 500 "Failed to fetch image from ..."
    (NOT_AN_IMAGE, "invalid_image_format"),  # vLLM: a 400 "cannot identify image file ..."
])
def test_an_image_the_model_server_refuses_in_its_own_words_gets_openais_code(vision_stack: openai.OpenAI, url: str, code: str) -> None:
    content: Any = [{"type": "input_text", "text": "what is this?"}, {"type": "input_image", "image_url": url}]
    with pytest.raises(openai.BadRequestError) as refused:
        vision_stack.responses.create(model="fake-model", input=[{"role": "user", "content": content}])
    assert refused.value.code == code
    with pytest.raises(openai.BadRequestError) as streamed:  # refused before any output: the stream's status, not response.failed
        list(vision_stack.responses.create(model="fake-model", input=[{"role": "user", "content": content}], stream=True))
    assert streamed.value.code == code
    # The same image that is one: answered.
    fine = [{"type": "input_text", "text": "[tokens:1] what is this?"}, {"type": "input_image", "image_url": PNG_HEADER_ONLY}]
    assert vision_stack.responses.create(model="fake-model", input=[{"role": "user", "content": fine}]).status == "completed"
