"""The conversation store on SQLite and PostgreSQL: exact order, atomic blocks under concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from builder.config import PostgresBackend, SqliteBackend
from providers.conversations.store import ConversationStore
from runtime.storage import open_database
from support.postgres import fresh_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteBackend | PostgresBackend]:
    if request.param == "sqlite":
        yield SqliteBackend(type="sqlite", path=tmp_path / "c.db")
        return
    with fresh_database() as dsn:
        yield PostgresBackend(type="postgres", dsn=dsn, pool_size=20)


@pytest.fixture
async def store(backend: SqliteBackend | PostgresBackend) -> AsyncIterator[ConversationStore]:
    db = open_database(backend)
    store = ConversationStore(db)
    await store.create_tables()
    yield store
    await db.close()


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
        seen += [item["id"] for item in page]
        if not has_more:
            break
        after = page[-1]["id"]
    assert seen == [item["id"] for item in await store.items("conv_2")]
    assert len(seen) == len(set(seen)) == 203


async def test_deleting_a_conversation_removes_its_items(store: ConversationStore) -> None:
    await store.create("conv_3", None, items("x", 2))
    await store.delete("conv_3")
    await store.create("conv_3", None, [])
    assert await store.items("conv_3") == []
