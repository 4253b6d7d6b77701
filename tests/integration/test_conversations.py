"""The Conversations API, and responses that read and extend a conversation."""

from __future__ import annotations

from typing import Any

import openai
import pytest

ITEMS_OF_EVERY_TYPE: list[Any] = [
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
        {"type": "input_file", "file_id": "file_1", "filename": "a.pdf"},
    ]},
    {"type": "message", "role": "assistant", "status": "completed", "content": [
        {"type": "output_text", "text": "seen", "annotations": []}, {"type": "refusal", "refusal": "but no"}]},
    {"type": "function_call", "call_id": "call_1", "name": "get", "arguments": "{}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "done", "status": "completed"},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
]


def test_the_full_crud_walk(openai_client: openai.OpenAI) -> None:
    conversation = openai_client.conversations.create(metadata={"topic": "walk"}, items=[{"role": "user", "content": "first"}])
    assert conversation.id.startswith("conv_") and conversation.object == "conversation"
    assert openai_client.conversations.retrieve(conversation.id).metadata == {"topic": "walk"}
    assert openai_client.conversations.update(conversation.id, metadata={"topic": "changed"}).metadata == {"topic": "changed"}

    added = openai_client.conversations.items.create(conversation.id, items=[
        {"role": "assistant", "content": "second"}, {"role": "user", "content": "third"}])
    assert [item.role for item in added.data] == ["assistant", "user"]  # type: ignore[union-attr]
    listed = openai_client.conversations.items.list(conversation.id, order="asc")
    texts = [item.content[0].text for item in listed.data]  # type: ignore[union-attr]
    assert texts == ["first", "second", "third"]
    assert listed.first_id == listed.data[0].id and listed.last_id == listed.data[-1].id and listed.has_more is False

    second = listed.data[1]
    assert openai_client.conversations.items.retrieve(second.id, conversation_id=conversation.id).id == second.id  # type: ignore[union-attr]
    after_delete = openai_client.conversations.items.delete(second.id, conversation_id=conversation.id)  # type: ignore[union-attr]
    assert after_delete.id == conversation.id and after_delete.object == "conversation"
    assert len(openai_client.conversations.items.list(conversation.id).data) == 2

    deleted = openai_client.conversations.delete(conversation.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (conversation.id, True, "conversation.deleted")
    with pytest.raises(openai.NotFoundError):
        openai_client.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.conversations.items.list(conversation.id)


def test_items_of_every_type_round_trip_unchanged(openai_client: openai.OpenAI) -> None:
    conversation = openai_client.conversations.create(items=ITEMS_OF_EVERY_TYPE)
    stored = openai_client.get(f"/conversations/{conversation.id}/items", cast_to=object, options={"params": {"order": "asc"}})
    data: list[dict[str, Any]] = stored["data"]  # type: ignore[index]
    assert [item["type"] for item in data] == [item["type"] for item in ITEMS_OF_EVERY_TYPE]
    for sent, kept in zip(ITEMS_OF_EVERY_TYPE, data, strict=True):
        assert kept["id"]
        for key, value in sent.items():
            assert kept[key] == value if key != "content" or sent["role"] == "assistant" else kept[key][0]["text"] == "look"
    assert data[0]["content"] == ITEMS_OF_EVERY_TYPE[0]["content"]


def test_two_hundred_fifty_items_paginate_in_both_orders(openai_client: openai.OpenAI) -> None:
    conversation = openai_client.conversations.create()
    for start in range(0, 250, 20):
        openai_client.conversations.items.create(conversation.id, items=[
            {"role": "user", "content": f"item {i}"} for i in range(start, min(start + 20, 250))])
    ascending = [item.content[0].text for item in openai_client.conversations.items.list(conversation.id, order="asc", limit=100)]  # type: ignore[union-attr]
    assert ascending == [f"item {i}" for i in range(250)]
    descending = [item.content[0].text for item in openai_client.conversations.items.list(conversation.id, limit=7)]  # type: ignore[union-attr]
    assert descending == [f"item {i}" for i in reversed(range(250))]
    page = openai_client.conversations.items.list(conversation.id, limit=100, order="asc")
    assert page.has_more is True and len(page.data) == 100


def test_three_responses_in_a_conversation_each_see_the_previous_turns(openai_client: openai.OpenAI, text_model: str) -> None:
    conversation = openai_client.conversations.create(items=[{"role": "user", "content": "hello"}])
    usages = []
    for text in ("one", "two", "three"):
        response = openai_client.responses.create(model=text_model, input=text, conversation=conversation.id)
        assert response.conversation is not None and response.conversation.id == conversation.id
        assert response.output_text == f"You said: {text}"
        assert response.usage is not None
        usages.append(response.usage.input_tokens)
    # hello; then each turn adds its input (1 token) and output (3 tokens) to the next one's context.
    assert usages == [2, 2 + 4, 2 + 8]
    items = openai_client.conversations.items.list(conversation.id, order="asc")
    roles = [(item.role, item.content[0].text) for item in items.data]  # type: ignore[union-attr]
    assert roles == [("user", "hello"), ("user", "one"), ("assistant", "You said: one"), ("user", "two"),
                     ("assistant", "You said: two"), ("user", "three"), ("assistant", "You said: three")]


def test_a_conversation_given_as_an_object_and_streamed(openai_client: openai.OpenAI, text_model: str) -> None:
    conversation = openai_client.conversations.create()
    events = list(openai_client.responses.create(model=text_model, input="[tokens:2]", conversation={"id": conversation.id}, stream=True))
    assert events[-1].type == "response.completed"
    assert len(openai_client.conversations.items.list(conversation.id).data) == 2


def test_a_failed_response_and_store_false_append_nothing(openai_client: openai.OpenAI, text_model: str) -> None:
    conversation = openai_client.conversations.create(items=[{"role": "user", "content": "start"}])
    with pytest.raises(openai.InternalServerError):
        openai_client.responses.create(model=text_model, input="[error:500]", conversation=conversation.id)
    with pytest.raises(openai.InternalServerError):  # streamed, refused before any output: the error itself
        list(openai_client.responses.create(model=text_model, input="[error:503]", conversation=conversation.id, stream=True))
    openai_client.responses.create(model=text_model, input="not kept", conversation=conversation.id, store=False)
    assert len(openai_client.conversations.items.list(conversation.id).data) == 1


def test_an_unknown_conversation_is_a_404_everywhere(openai_client: openai.OpenAI, text_model: str) -> None:
    with pytest.raises(openai.NotFoundError) as error:
        openai_client.responses.create(model=text_model, input="x", conversation="conv_fake")
    assert error.value.param == "conversation" and "conv_fake" in error.value.message
    for call in (lambda: openai_client.conversations.retrieve("conv_fake"),
                 lambda: openai_client.conversations.items.create("conv_fake", items=[{"role": "user", "content": "x"}]),
                 lambda: openai_client.conversations.delete("conv_fake")):
        with pytest.raises(openai.NotFoundError) as not_found:
            call()
        assert not_found.value.code == "conversation_not_found"


def test_an_id_that_is_not_a_conversation_id_is_a_400_everywhere(openai_client: openai.OpenAI) -> None:
    calls = [
        lambda: openai_client.conversations.retrieve("invalid-no-conv-prefix"),
        lambda: openai_client.conversations.update("invalid-no-conv-prefix", metadata={}),
        lambda: openai_client.conversations.delete("invalid-no-conv-prefix"),
        lambda: openai_client.conversations.items.list("invalid-no-conv-prefix"),
        lambda: openai_client.conversations.items.create("invalid-no-conv-prefix", items=[{"role": "user", "content": "x"}]),
        lambda: openai_client.conversations.items.retrieve("msg_1", conversation_id="invalid-no-conv-prefix"),
        lambda: openai_client.conversations.items.delete("msg_1", conversation_id="invalid-no-conv-prefix"),
    ]
    for call in calls:
        with pytest.raises(openai.BadRequestError) as error:
            call()
        assert error.value.param == "conversation_id"
        assert error.value.message.endswith("Invalid 'conversation_id': 'invalid-no-conv-prefix'. Expected an ID that begins with 'conv'.")


@pytest.mark.parametrize(("items", "param"), [
    ([{"role": "user", "content": str(i)} for i in range(21)], "items"),
    ([{"type": "telepathy"}], "items[0].type"),
    ([{"role": "user", "content": [{"type": "input_text", "text": 5}]}], "items[0].content[0].text"),
    ([{"role": "user"}], "items[0].content"),
])
def test_bad_items_are_400s_naming_the_field(openai_client: openai.OpenAI, items: list[Any], param: str) -> None:
    conversation = openai_client.conversations.create()
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.conversations.items.create(conversation.id, items=items)
    assert error.value.param == param


@pytest.mark.parametrize("metadata", [
    {f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513},
])
def test_metadata_limits(openai_client: openai.OpenAI, metadata: dict[str, str]) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.conversations.create(metadata=metadata)
    assert (error.value.param or "").startswith("metadata")


def test_list_limits_are_checked(openai_client: openai.OpenAI) -> None:
    conversation = openai_client.conversations.create()
    with pytest.raises(openai.BadRequestError):
        openai_client.conversations.items.list(conversation.id, limit=101)


def test_an_unknown_parameter_is_refused_not_dropped(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.conversations.create(metadata={"k": "v"}, extra_body={"metdata": {"typo": "yes"}})
    assert (error.value.code, error.value.param) == ("unknown_parameter", "metdata")
    conversation = openai_client.conversations.create()
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.conversations.update(conversation.id, metadata={}, extra_body={"title": "x"})
    assert error.value.param == "title"
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.conversations.items.create(conversation.id, items=[{"type": "message", "role": "user", "content": "hi"}],
                                                 extra_body={"position": 0})
    assert error.value.param == "position"
    assert openai_client.conversations.items.list(conversation.id).data == []  # nothing was added
