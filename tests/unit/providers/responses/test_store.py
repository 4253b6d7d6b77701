"""The response store on SQLite and PostgreSQL: a response's final state and output replace its
first, and a finish conditioned on the stored status does nothing once another state won; a background
response's status, lease and logged events."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from builder.config import PostgresBackend, SqliteBackend
from providers.responses.store import ResponseStore
from runtime.storage import Database
from support.storage import statement_threads


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


async def test_a_background_response_changes_status_only_from_the_statuses_named(store: ResponseStore) -> None:
    await store.insert(response("resp_3", "queued"), ancestors=[], input_items=[], request={"model": "m", "input": "hi"})
    started = response("resp_3", "in_progress")
    assert await store.set_status("resp_3", "in_progress", started, only_if_status=["queued"])
    assert not await store.set_status("resp_3", "in_progress", started, only_if_status=["queued"])  # started once only
    assert (await store.get("resp_3")).status == "in_progress"
    assert await store.set_status("resp_3", "cancelled", response("resp_3", "cancelled"), only_if_status=["queued", "in_progress"])
    assert not await store.set_status("resp_3", "failed", response("resp_3", "failed"), only_if_status=["queued", "in_progress"])
    stored = await store.get("resp_3")
    assert stored.status == "cancelled" and stored.response["status"] == "cancelled"
    assert not await store.set_status("resp_nobody", "in_progress", started, only_if_status=["queued"])


async def test_a_heartbeat_renews_the_lease_and_says_the_stored_status(store: ResponseStore) -> None:
    await store.insert(response("resp_4", "queued"), ancestors=[], input_items=[], request={"model": "m", "input": "hi"})
    before = time.time()
    assert [orphan.id for orphan in await store.orphaned(before + 1)] == ["resp_4"]
    assert await store.heartbeat("resp_4") == "queued"
    assert await store.orphaned(before) == []  # the lease was renewed after `before`
    await store.set_status("resp_4", "cancelled", response("resp_4", "cancelled"), only_if_status=["queued"])
    assert await store.heartbeat("resp_4") == "cancelled"
    assert await store.heartbeat("resp_nobody") is None


async def test_logged_events_are_read_back_in_order_and_announced(store: ResponseStore) -> None:
    announced: asyncio.Queue[str] = asyncio.Queue()
    await store.on_events(announced.put_nowait)
    await store.insert(response("resp_5", "in_progress"), ancestors=[], input_items=[], request={"model": "m", "input": "hi"})
    events = [{"type": "response.output_text.delta", "sequence_number": number, "delta": f"é{number}", "obfuscation": None}
              for number in range(40)]
    await store.append_events("resp_5", events[:1])
    await store.append_events("resp_5", events[1:])  # a batch of many, in one write
    await store.append_events("resp_5", [])  # nothing to log: nothing announced
    assert await store.events_after("resp_5", -1) == events
    assert await store.events_after("resp_5", 37) == events[38:]
    assert [await asyncio.wait_for(announced.get(), 10) for _ in range(2)] == ["resp_5", "resp_5"]
    await asyncio.sleep(0.2)
    assert announced.empty()


async def test_a_response_and_whether_it_is_readable_are_read_on_the_event_loop(store: ResponseStore,
                                                                                   backend: SqliteBackend | PostgresBackend) -> None:
    # One indexed row each (a response continued by previous_response_id is checked on every turn):
    # a reading thread's hop there and back would cost more than the read. PostgreSQL has no threads.
    await store.insert(response("resp_l", "completed"), ancestors=[], input_items=[], output_items=[message("msg_l", "hi")])
    with statement_threads(backend) as looked_up:
        assert (await store.get("resp_l")).status == "completed"
        assert await store.readable("resp_l")
        assert not await store.readable("resp_absent")
    assert [table for _, table in looked_up] == ["responses"] * 3
    if store.db.dialect == "sqlite":
        assert {thread for thread, _ in looked_up} == {threading.current_thread().name}
