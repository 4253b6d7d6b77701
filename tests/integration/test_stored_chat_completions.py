"""Stored chat completions: written when `store` is true, listed, read, updated and deleted."""

from __future__ import annotations

import openai
import pytest


def create(client: openai.OpenAI, model: str, text: str, tag: str, store: bool = True) -> str:
    completion = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], store=store, metadata={"test": tag} if store else None
    )
    return completion.id


def test_the_full_walk(openai_client: openai.OpenAI, text_model: str) -> None:
    completion_id = create(openai_client, text_model, "store me", "walk")
    stored = openai_client.chat.completions.retrieve(completion_id)
    assert stored.choices[0].message.content == "You said: store me"
    assert stored.metadata == {"test": "walk"}

    [message] = openai_client.chat.completions.messages.list(completion_id).data
    assert (message.id, message.role, message.content) == (f"{completion_id}-0", "user", "store me")

    updated = openai_client.chat.completions.update(completion_id, metadata={"test": "walk", "reviewed": "yes"})
    assert updated.metadata == {"test": "walk", "reviewed": "yes"}

    listed = openai_client.chat.completions.list(metadata={"test": "walk"})
    assert [item.id for item in listed.data] == [completion_id]

    deleted = openai_client.chat.completions.delete(completion_id)
    assert (deleted.id, deleted.deleted, deleted.object) == (completion_id, True, "chat.completion.deleted")
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.retrieve(completion_id)


def test_identical_requests_are_stored_apart(openai_client: openai.OpenAI, text_model: str) -> None:
    # The upstream answers both with the same id (the fake derives it from the request, as some
    # servers reuse theirs): each stored completion still has an id of its own, and neither
    # replaces the other.
    ask = {"model": text_model, "messages": [{"role": "user", "content": "same question"}], "store": True, "metadata": {"test": "twins"}}
    first = openai_client.chat.completions.create(**ask)
    second = openai_client.chat.completions.create(**ask)
    assert first.id != second.id
    openai_client.chat.completions.update(first.id, metadata={"test": "twins", "who": "first"})
    assert openai_client.chat.completions.retrieve(second.id).metadata == {"test": "twins"}
    assert openai_client.chat.completions.retrieve(first.id).metadata == {"test": "twins", "who": "first"}
    assert [item.id for item in openai_client.chat.completions.list(metadata={"test": "twins"})] == [first.id, second.id]
    streamed = [
        {chunk.id for chunk in openai_client.chat.completions.create(
            model=text_model, messages=[{"role": "user", "content": "[tokens:2]"}], stream=True, store=True, metadata={"test": "twin-streams"})}
        for _ in range(2)
    ]
    assert all(len(ids) == 1 for ids in streamed) and streamed[0] != streamed[1]
    for ids in streamed:
        assert openai_client.chat.completions.retrieve(ids.pop()).choices[0].message.content == "tok1 tok2"


def test_nothing_is_stored_without_store(openai_client: openai.OpenAI, text_model: str) -> None:
    completion_id = create(openai_client, text_model, "do not store me", "none", store=False)
    with pytest.raises(openai.NotFoundError) as error:
        openai_client.chat.completions.retrieve(completion_id)
    assert error.value.param == "completion_id"


def test_a_stored_stream_is_retrievable_whole(openai_client: openai.OpenAI, text_model: str) -> None:
    stream = openai_client.chat.completions.create(
        model=text_model, messages=[{"role": "user", "content": "[tokens:4]"}], stream=True, store=True, metadata={"test": "stream"}
    )
    completion_id = [chunk.id for chunk in stream][0]
    stored = openai_client.chat.completions.retrieve(completion_id)
    assert stored.choices[0].message.content == "tok1 tok2 tok3 tok4"
    assert stored.choices[0].finish_reason == "stop"


def test_the_paginator_walks_every_stored_completion_in_order(openai_client: openai.OpenAI, text_model: str) -> None:
    ids = [create(openai_client, text_model, f"page item {i}", "paging") for i in range(5)]
    assert [item.id for item in openai_client.chat.completions.list(metadata={"test": "paging"}, limit=2)] == ids
    newest_first = openai_client.chat.completions.list(metadata={"test": "paging"}, limit=2, order="desc")
    assert [item.id for item in newest_first] == ids[::-1]
    first_page = openai_client.chat.completions.list(metadata={"test": "paging"}, limit=2)
    assert first_page.has_more and len(first_page.data) == 2
    # No documented maximum: clients ask for 1,000 at once (beyond that, a 400).
    assert [item.id for item in openai_client.chat.completions.list(metadata={"test": "paging"}, limit=1000).data] == ids
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.list(limit=1001)


def test_listing_filters_by_model(openai_client: openai.OpenAI, text_model: str) -> None:
    create(openai_client, text_model, "model filter", "model")
    assert openai_client.chat.completions.list(model="nobody", metadata={"test": "model"}).data == []
    assert len(openai_client.chat.completions.list(model=text_model, metadata={"test": "model"}).data) == 1


def test_metadata_limits_are_400s(openai_client: openai.OpenAI, text_model: str) -> None:
    completion_id = create(openai_client, text_model, "limits", "limits")
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.chat.completions.update(completion_id, metadata={f"k{i}": "v" for i in range(17)})
    assert error.value.param == "metadata"
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.update(completion_id, metadata={"k": "v" * 513})


def test_unknown_ids_are_404s(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.messages.list("chatcmpl-missing")
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.delete("chatcmpl-missing")
