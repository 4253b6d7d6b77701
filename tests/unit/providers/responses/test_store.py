"""The response store on SQLite and PostgreSQL: a response's final state and output replace its
first, and a finish conditioned on the stored status does nothing once another state won."""

from __future__ import annotations

from typing import Any

import pytest

from providers.responses.store import ResponseStore
from runtime.storage import Database


@pytest.fixture
async def store(database: Database) -> ResponseStore:
    store = ResponseStore(database)
    await store.create_tables()
    return store


def response(response_id: str, status: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": 1764033352, "status": status, "output": []}


def message(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


async def test_finishing_replaces_the_output_and_keeps_the_input(store: ResponseStore) -> None:
    first = message("msg_1", "partial")
    await store.insert(response("resp_1", "in_progress"), ancestors=[], input_items=[message("msg_in", "hi")], output_items=[first])
    final = [message("msg_2", "é \"q\" 🙂"), {"id": "fc_1", "type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}]
    assert await store.finish(response("resp_1", "completed"), final, only_if_status=["in_progress"])
    assert (await store.get("resp_1")).status == "completed"
    assert await store.items_of("resp_1", "output") == final
    assert await store.items_of("resp_1", "input") == [message("msg_in", "hi")]
    assert await store.finish(response("resp_1", "completed"), [])  # unconditioned: no output left
    assert await store.items_of("resp_1", "output") == []


async def test_a_finish_conditioned_on_the_status_does_nothing_once_another_state_won(store: ResponseStore) -> None:
    await store.insert(response("resp_2", "in_progress"), ancestors=[], input_items=[], output_items=[message("msg_1", "a")])
    assert await store.finish(response("resp_2", "cancelled"), [], only_if_status=["in_progress"])  # the cancel wins
    assert not await store.finish(response("resp_2", "completed"), [message("msg_2", "b")], only_if_status=["in_progress"])
    assert not await store.finish(response("resp_2", "completed"), [message("msg_2", "b")], only_if_status=["queued", "in_progress"])
    assert (await store.get("resp_2")).status == "cancelled"
    assert await store.items_of("resp_2", "output") == []
    assert await store.finish(response("resp_2", "failed"), [message("msg_3", "c")], only_if_status=["queued", "cancelled"])
    assert await store.items_of("resp_2", "output") == [message("msg_3", "c")]
    assert not await store.finish(response("resp_nobody", "completed"), [message("msg_4", "d")])
