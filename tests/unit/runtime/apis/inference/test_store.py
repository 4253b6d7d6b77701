"""The stored chat completions on SQLite and PostgreSQL: a completion is saved whole with what
it was asked, listed in the order it was saved, and an id is never saved twice."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.apis.inference.store import ChatCompletionStore, new_completion_id
from runtime.storage import Database, IntegrityError


@pytest.fixture
async def store(database: Database) -> ChatCompletionStore:
    store = ChatCompletionStore(database)
    await store.create_tables()
    return store


def completion(text: str, model: str = "fake/model") -> dict[str, Any]:
    return {"id": new_completion_id(), "object": "chat.completion", "created": 1764033352, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


async def test_a_saved_completion_reads_back_whole_with_its_messages(store: ChatCompletionStore) -> None:
    saved = completion("é \"q\" 🙂")
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c", "content": None}]
    await store.save(saved, messages, {"k": "v"}, "chatcmpl-upstream")
    assert await store.get(saved["id"]) == {**saved, "metadata": {"k": "v"}}
    assert await store.messages(saved["id"]) == messages
    plain = completion("no metadata")
    await store.save(plain, [], None)
    assert (await store.get(plain["id"]))["metadata"] == {}


async def test_completions_list_in_the_order_saved_and_filter_by_model(store: ChatCompletionStore) -> None:
    saved = [completion(f"answer {index}", model="a" if index % 2 else "b") for index in range(5)]
    for one in saved:
        await store.save(one, [], None)
    listed, more = await store.page(after=None, limit=10, order="asc", model=None, metadata={})
    assert [one["id"] for one in listed] == [one["id"] for one in saved] and not more
    listed, more = await store.page(after=saved[0]["id"], limit=1, order="asc", model="a", metadata={})
    assert [one["id"] for one in listed] == [saved[1]["id"]] and more


async def test_an_id_is_never_saved_twice(store: ChatCompletionStore) -> None:
    first = completion("first")
    await store.save(first, [], None)
    with pytest.raises(IntegrityError):
        await store.save({**first, "choices": []}, [], None)
    assert (await store.get(first["id"]))["choices"] == first["choices"]
