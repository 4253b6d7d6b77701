"""The conversation store on SQLite and PostgreSQL: exact order, atomic blocks under concurrency."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from builder.config import PostgresBackend, SqliteBackend
from providers.conversations.store import ConversationStore
from contract.caller import CALLER, GRANTS
from contract.caller import Principal
from contract.errors import NotFoundError
from runtime.storage import Database, open_database
from support.storage import statement_threads



@pytest.fixture
async def store(database: Database) -> ConversationStore:
    store = ConversationStore(database)
    await store.create_tables()
    return store


def items(tag: str, count: int) -> list[dict[str, str]]:
    return [{"id": f"{tag}-{i}", "type": "message", "text": f"{tag} {i}"} for i in range(count)]


async def test_concurrent_appends_each_stay_one_contiguous_block(store: ConversationStore) -> None:
    await store.create("conv_1", None, [])
    await asyncio.gather(*(store.append("conv_1", items(f"w{w}", 7)) for w in range(24)))
    ids = [item["id"] for item in await store.items("conv_1")]
    assert len(ids) == 24 * 7
    blocks = [ids[i:i + 7] for i in range(0, len(ids), 7)]
    for block in blocks:
        writer = block[0].split("-")[0]
        assert block == [f"{writer}-{i}" for i in range(7)]


async def test_pages_never_skip_or_repeat_items_added_in_the_same_instant(store: ConversationStore) -> None:
    await store.create("conv_2", {"k": "v"}, items("first", 3))
    for batch in range(10):
        await store.append("conv_2", items(f"b{batch}", 20))
    seen: list[str] = []
    after = None
    while True:
        page, has_more = await store.page("conv_2", after=after, limit=17, order="asc")
        seen += [item.id for item in page]
        if not has_more:
            break
        after = page[-1].id
    assert seen == [item["id"] for item in await store.items("conv_2")]
    assert len(seen) == len(set(seen)) == 203


async def test_a_page_holds_each_item_as_the_json_text_it_was_stored_as(store: ConversationStore) -> None:
    stored = [{"id": "m-1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "naïve \"quoted\" 🙂"}]},
              {"id": "ws-1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}}]
    await store.create("conv_t", None, stored)
    page, has_more = await store.page("conv_t", after=None, limit=20, order="desc")
    assert not has_more
    assert [(item.id, item.parsed()) for item in page] == [("ws-1", stored[1]), ("m-1", stored[0])]
    assert all(isinstance(item.text, str) and json.loads(item.text) == item.parsed() for item in page)


async def test_deleting_a_conversation_removes_its_items(store: ConversationStore) -> None:
    await store.create("conv_3", None, items("x", 2))
    await store.delete("conv_3")
    await store.create("conv_3", None, [])
    assert await store.items("conv_3") == []


async def test_the_context_is_reused_until_something_changes_it_here_or_in_another_process(
    backend: SqliteBackend | PostgresBackend, store: ConversationStore
) -> None:
    other_db = open_database(backend)  # another process on the same database
    other = ConversationStore(other_db)
    try:
        await store.create("conv_c", None, items("a", 3))
        first = await store.items("conv_c")
        assert [item["id"] for item in first] == ["a-0", "a-1", "a-2"]
        assert await store.items("conv_c") is first  # unchanged: reused, no item read

        await store.append("conv_c", items("b", 2))  # here: the cached list is continued
        assert [item["id"] for item in await store.items("conv_c")] == ["a-0", "a-1", "a-2", "b-0", "b-1"]

        await other.append("conv_c", items("c", 1))  # there: seen by its version
        assert [item["id"] for item in await store.items("conv_c")][-2:] == ["b-1", "c-0"]

        await other.delete_item("conv_c", "a-1")  # a delete moves the version too
        assert [item["id"] for item in await store.items("conv_c")] == ["a-0", "a-2", "b-0", "b-1", "c-0"]

        await other.delete("conv_c")
        with pytest.raises(NotFoundError):
            await store.items("conv_c")
    finally:
        await other_db.close()


async def test_concurrent_appends_and_reads_never_leave_a_stale_context(store: ConversationStore) -> None:
    await store.create("conv_r", None, [])

    async def writer(w: int) -> None:
        for round_ in range(5):
            await store.append("conv_r", items(f"w{w}.{round_}", 3))
            await store.items("conv_r")

    await asyncio.gather(*(writer(w) for w in range(8)))
    cached = [item["id"] for item in await store.items("conv_r")]
    fresh = ConversationStore(store.db)
    assert cached == [item["id"] for item in await fresh.items("conv_r")]
    assert len(cached) == 8 * 5 * 3


def test_the_cache_is_bounded_by_items(tmp_path: Path) -> None:
    async def scenario() -> None:
        db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "b.db"))
        store = ConversationStore(db, cached_items=10)
        await store.create_tables()
        try:
            for name in ("x", "y", "z"):
                await store.create(name, None, items(name, 4))
                await store.items(name)
            assert list(store._contexts) == ["y", "z"] and store._cached == 8
            await store.create("big", None, items("big", 11))
            await store.items("big")  # larger than the whole cache: not kept
            assert "big" not in store._contexts and store._cached == 8
        finally:
            await db.close()

    asyncio.run(scenario())


async def test_lookups_by_id_and_a_cached_context_s_check_are_read_on_the_event_loop(tmp_path: Path) -> None:
    # One indexed row each: a reading thread's hop there and back would cost more than the read.
    backend = SqliteBackend(type="sqlite", path=tmp_path / "l.db")
    db = open_database(backend)
    store = ConversationStore(db)
    other = ConversationStore(db)  # another process's cache, so to speak: this one's goes stale
    loop_thread = threading.current_thread().name
    try:
        await store.create_tables()
        await store.create("conv_l", None, items("a", 3))
        with statement_threads(backend) as uncached:
            await store.items("conv_l")  # not cached yet: the whole list, on a reading thread
        with statement_threads(backend) as looked_up:
            await store.get("conv_l")
            await store.get_item("conv_l", "a-1")
            await store.items("conv_l")  # cached: only its version is read
            await store.append("conv_l", [])
        await other.append("conv_l", items("b", 1))
        with statement_threads(backend) as stale:
            assert [item["id"] for item in await store.items("conv_l")][-1] == "b-0"
    finally:
        await db.close()
    assert {thread for thread, _ in uncached} != {loop_thread}
    assert [table for _, table in looked_up] == ["conversations", "conversations", "conversation_items", "conversations", "conversations"]
    assert {thread for thread, _ in looked_up} == {loop_thread}
    # A stale list: its version on the loop, then version and items together, in one snapshot, on a reading thread.
    assert stale[0] == (loop_thread, "conversations") and [table for _, table in stale[1:]] == ["conversations", "conversation_items"]
    assert loop_thread not in {thread for thread, _ in stale[1:]}


@contextmanager
def acting_as(principal: str, update_grants: frozenset[str] | None = None) -> Iterator[None]:
    caller = CALLER.set(Principal(principal, {}))
    grants = GRANTS.set({"update": update_grants} if update_grants is not None else None)
    try:
        yield
    finally:
        GRANTS.reset(grants)
        CALLER.reset(caller)


async def test_an_append_reaches_only_a_conversation_the_caller_may_update_and_adds_nothing_otherwise(store: ConversationStore) -> None:
    with acting_as("alice"):
        await store.create("conv_alice", None, items("a", 1))
    with acting_as("bob"):
        await store.create("conv_bob", None, items("b", 1))
    with acting_as("alice"):
        await store.append("conv_alice", items("a2", 2))
        for missing in ("conv_bob", "conv_nobody"):
            with pytest.raises(NotFoundError):
                await store.append(missing, items("x", 2))
    with acting_as("alice", frozenset({"bob"})):  # an access policy lets alice update bob's conversations
        await store.append("conv_bob", items("b2", 2))
    with acting_as("bob"):
        assert [item["id"] for item in await store.items("conv_bob")] == ["b-0", "b2-0", "b2-1"]
        page, more = await store.page("conv_bob", after=None, limit=10, order="asc")
        assert [item.id for item in page] == ["b-0", "b2-0", "b2-1"] and not more
    assert [item["id"] for item in await store.items("conv_alice")] == ["a-0", "a2-0", "a2-1"]
