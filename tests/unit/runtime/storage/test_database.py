"""`Database` and `Storage` on SQLite and (where it is reachable) PostgreSQL: tables and their additive
migrations, transactions, concurrent writers and readers, cancelled writers, the backends of a stack."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from builder.config import PostgresBackend, SqliteBackend, StorageConfig, StoresConfig
from runtime.errors import InvalidRequestError
from runtime.storage import PARTIAL_INDEX_WHERE, Database, Storage, json_type, open_database
from support.storage import PG_DSN, Backend, checked_out, ids_of


async def test_create_tables_is_idempotent(database: Database, items: sa.Table) -> None:
    await database.create_tables(items.metadata)
    await database.execute(items.insert().values(id="a"))
    await database.create_tables(items.metadata)
    assert await ids_of(database, items) == ["a"]


async def test_create_tables_adds_the_columns_and_indexes_a_newer_release_declares(database: Database, backend: Backend) -> None:
    older = sa.Table("grown", sa.MetaData(schema=backend.schema), sa.Column("id", sa.String(64), primary_key=True))
    await database.create_tables(older.metadata)
    await database.execute(older.insert().values(id="kept"))
    newer = sa.Table(
        "grown", sa.MetaData(schema=backend.schema),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("extra", json_type(), nullable=True),
        sa.Index("ix_grown_owner", "owner"),
    )
    await database.create_tables(newer.metadata)
    await database.create_tables(newer.metadata)  # and again, as at every start
    await database.execute(newer.insert().values(id="new", owner="ada", extra={"k": 1}))
    rows = await database.fetch_all(sa.select(newer).order_by(newer.c.id))
    assert [dict(row) for row in rows] == [{"id": "kept", "owner": None, "extra": None}, {"id": "new", "owner": "ada", "extra": {"k": 1}}]
    indexes = await database.read_with(lambda conn: sa.inspect(conn).get_indexes("grown", schema=backend.schema))
    assert "ix_grown_owner" in {index["name"] for index in indexes}


async def test_create_tables_refuses_to_add_a_required_column_to_existing_rows(database: Database, backend: Backend) -> None:
    older = sa.Table("strict", sa.MetaData(schema=backend.schema), sa.Column("id", sa.String(64), primary_key=True))
    await database.create_tables(older.metadata)
    newer = sa.Table("strict", sa.MetaData(schema=backend.schema), sa.Column("id", sa.String(64), primary_key=True),
                     sa.Column("must", sa.Integer, nullable=False))
    with pytest.raises(RuntimeError, match="NOT NULL column must"):
        await database.create_tables(newer.metadata)


async def test_insert_fetch_one_fetch_all(database: Database, ready: sa.Table) -> None:
    assert await database.execute(ready.insert().values(id="a", n=1)) == 1
    await database.execute(ready.insert().values(id="b", n=2))
    row = await database.fetch_one(sa.select(ready).where(ready.c.id == "b"))
    assert row is not None and row["n"] == 2 and row["payload"] is None
    assert await database.fetch_one(sa.select(ready).where(ready.c.id == "z")) is None
    rows = await database.fetch_all(sa.select(ready.c.id, ready.c.n).order_by(ready.c.id))
    assert [dict(r) for r in rows] == [{"id": "a", "n": 1}, {"id": "b", "n": 2}]
    assert await database.execute(ready.update().values(n=9)) == 2


async def test_transaction_rolls_back_on_error(database: Database, ready: sa.Table) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with database.transaction() as conn:
            await conn.execute(ready.insert().values(id="a"))
            await conn.execute(ready.insert().values(id="b"))
            raise RuntimeError("boom")
    assert await ids_of(database, ready) == []
    async with database.transaction() as conn:
        await conn.execute(ready.insert().values(id="c"))
    assert await ids_of(database, ready) == ["c"]
    assert checked_out(database) == 0


async def test_upsert_inserts_then_updates(database: Database, ready: sa.Table) -> None:
    await database.upsert(ready, {"id": "a", "n": 1, "payload": {"v": 1}}, key=["id"])
    await database.upsert(ready, {"id": "a", "n": 2, "payload": {"v": 2}}, key=["id"])
    await database.upsert(ready, {"id": "a"}, key=["id"])  # key only: nothing to update
    rows = await database.fetch_all(sa.select(ready))
    assert [dict(r) for r in rows] == [{"id": "a", "n": 2, "payload": {"v": 2}}]
    with pytest.raises(ValueError):
        await database.upsert(ready, {"n": 3}, key=["id"])


async def test_json_round_trip(database: Database, ready: sa.Table) -> None:
    payload = {"a": [1, 2.5, {"b": None, "c": [True, False]}], "s": "é\n\"", "empty": {}}
    await database.execute(ready.insert().values(id="j", payload=payload))
    row = await database.fetch_one(sa.select(ready.c.payload))
    assert row is not None and row["payload"] == payload
    await database.execute(ready.insert().values(id="l", payload=[{"x": [[]]}, "y"]))
    row = await database.fetch_one(sa.select(ready.c.payload).where(ready.c.id == "l"))
    assert row is not None and row["payload"] == [{"x": [[]]}, "y"]


async def test_text_holding_a_nul_character_is_kept_in_json_and_a_400_elsewhere(database: Database, ready: sa.Table) -> None:
    # PostgreSQL's text and JSONB hold no U+0000, which JSON, OpenAI and SQLite take: in JSON it is
    # kept as U+FFFD (a literal backslash before "u0000" stays as it was); a key holding one is the
    # request's 400, never a server error.
    payload = {"text": "a\x00b", "escaped": "c\\u0000d", "both": ["\\\x00"]}
    await database.execute(ready.insert().values(id="nul", payload=payload))
    row = await database.fetch_one(sa.select(ready.c.payload).where(ready.c.id == "nul"))
    assert row is not None
    if database.dialect == "postgresql":
        assert row["payload"] == {"text": "a\ufffdb", "escaped": "c\\u0000d", "both": ["\\\ufffd"]}
        with pytest.raises(InvalidRequestError, match="null character"):
            await database.fetch_one(sa.select(ready.c.payload).where(ready.c.id == "x\x00"))
        with pytest.raises(InvalidRequestError, match="null character"):
            await database.execute(ready.insert().values(id="y\x00", payload=None))
    else:
        assert row["payload"] == payload
        assert await database.fetch_one(sa.select(ready.c.payload).where(ready.c.id == "x\x00")) is None


async def test_reads_are_not_blocked_by_an_open_write(
    database: Database, ready: sa.Table
) -> None:
    await database.execute(ready.insert().values(id="a"))
    async with database.transaction() as conn:
        await conn.execute(ready.insert().values(id="b"))
        # Reads run on other connections and see only committed rows.
        assert await asyncio.wait_for(ids_of(database, ready), 5) == ["a"]
    assert await ids_of(database, ready) == ["a", "b"]


async def test_concurrent_writes_and_reads_all_complete(
    database: Database, ready: sa.Table
) -> None:
    tasks, per_task = 32, 32  # 1,024 write transactions

    async def worker(t: int) -> None:
        for i in range(per_task):
            key = f"{t:02d}-{i:02d}"
            if i % 3 == 0:
                await database.execute(ready.insert().values(id=key, n=i))
            elif i % 3 == 1:
                await database.upsert(ready, {"id": key, "n": i, "payload": [t, i]}, key=["id"])
            else:
                async with database.transaction() as conn:
                    await conn.execute(ready.insert().values(id=key, n=i))
            if i % 4 == 0:
                await database.fetch_all(sa.select(ready.c.id).where(ready.c.n == i))

    await asyncio.wait_for(asyncio.gather(*(worker(t) for t in range(tasks))), 60)
    count = await database.fetch_one(sa.select(sa.func.count().label("c")).select_from(ready))
    assert count is not None and count["c"] == tasks * per_task
    ids = await ids_of(database, ready)
    assert ids == sorted(f"{t:02d}-{i:02d}" for t in range(tasks) for i in range(per_task))
    assert checked_out(database) == 0


async def test_cancelled_waiting_writer_releases_nothing_held(
    database: Database, ready: sa.Table
) -> None:
    holding, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with database.transaction() as conn:
            await conn.execute(ready.insert().values(id="held"))
            holding.set()
            await release.wait()

    async def waiter() -> None:
        # On SQLite this waits for the write lock; on PostgreSQL, for the row lock on "held".
        async with database.transaction() as conn:
            await conn.execute(ready.insert().values(id="held"))

    held = asyncio.create_task(holder())
    await holding.wait()
    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0.1)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await held
    await asyncio.wait_for(database.execute(ready.insert().values(id="later")), 5)
    assert await ids_of(database, ready) == ["held", "later"]
    assert checked_out(database) == 0


async def test_cancelled_holding_writer_rolls_back_and_unlocks(
    database: Database, ready: sa.Table
) -> None:
    holding = asyncio.Event()

    async def holder() -> None:
        async with database.transaction() as conn:
            await conn.execute(ready.insert().values(id="held"))
            holding.set()
            await asyncio.Event().wait()

    held = asyncio.create_task(holder())
    await holding.wait()
    queued = asyncio.create_task(database.execute(ready.insert().values(id="queued")))
    await asyncio.sleep(0.05)
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    assert await asyncio.wait_for(queued, 5) == 1
    await asyncio.wait_for(database.execute(ready.insert().values(id="later")), 5)
    assert await ids_of(database, ready) == ["later", "queued"]
    assert checked_out(database) == 0


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+asyncpg"])
async def test_postgres_dsn_uses_asyncpg(scheme: str) -> None:
    db = open_database(
        PostgresBackend(type="postgres", dsn=f"{scheme}://u:p%40ss@db:5432/x", pool_size=3)
    )
    try:
        assert db.dialect == "postgresql"
        assert db.engine.url.drivername == "postgresql+asyncpg"
        assert db.engine.url.password == "p@ss"
        pool: Any = db.engine.pool
        assert pool.size() == 3
    finally:
        await db.close()


def test_non_postgres_dsn_is_rejected() -> None:
    with pytest.raises(ValueError, match="mysql") as error:
        open_database(PostgresBackend(type="postgres", dsn="mysql://u:secret@h/db"))
    assert "secret" not in str(error.value)


async def test_storage_maps_stores_to_shared_backends(tmp_path: Path) -> None:
    config = StorageConfig(
        backends={
            "main": SqliteBackend(type="sqlite", path=tmp_path / "main.db"),
            "pg": PostgresBackend(type="postgres", dsn=PG_DSN),
        },
        stores=StoresConfig(responses="main", conversations="main", files="pg"),
    )
    storage = Storage(config, default_sqlite_path=tmp_path / "state" / "default.db")
    try:
        main = storage.database("responses")
        assert storage.database("conversations") is main
        assert storage.database("responses") is main
        assert storage.database("files").dialect == "postgresql"  # opened, not connected
        default = storage.database("chat_completions")
        assert storage.database("metadata") is default and default is not main
        await default.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        assert (tmp_path / "state" / "default.db").exists()
        await main.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        assert (tmp_path / "main.db").exists()
        with pytest.raises(ValueError, match="vectors"):
            storage.database("vectors")
    finally:
        await storage.close()


async def test_storage_declared_default_and_unknown_backend(tmp_path: Path) -> None:
    declared = SqliteBackend(type="sqlite", path=tmp_path / "declared.db")
    config = StorageConfig(backends={"default": declared}, stores=StoresConfig(files="nope"))
    storage = Storage(config, default_sqlite_path=tmp_path / "unused.db")
    try:
        await storage.database("responses").execute(sa.text("CREATE TABLE t (x INTEGER)"))
        assert (tmp_path / "declared.db").exists()
        assert not (tmp_path / "unused.db").exists()
        with pytest.raises(ValueError, match="'nope'"):
            storage.database("files")
    finally:
        await storage.close()


async def test_a_failing_write_among_concurrent_ones_fails_alone(database: Database, ready: sa.Table) -> None:
    # On SQLite these are committed as a group; the duplicate key must still fail on its own
    # and leave the other writes of its group committed.
    await database.execute(ready.insert().values(id="taken"))

    def insert(key: str) -> Any:
        return lambda conn: conn.execute(ready.insert().values(id=key)).rowcount

    results = await asyncio.gather(
        *(database.write(insert(key)) for key in ["a", "b", "taken", "c", "d"]), return_exceptions=True
    )
    assert [r if not isinstance(r, Exception) else "error" for r in results] == [1, 1, "error", 1, 1]
    assert isinstance(results[2], sa.exc.IntegrityError)
    assert await ids_of(database, ready) == ["a", "b", "c", "d", "taken"]


async def test_a_partial_index_is_partial_on_either_database(database: Database, backend: Backend) -> None:
    table = sa.Table("jobs", sa.MetaData(schema=backend.schema), sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("status", sa.String(16)), sa.Index("ix_jobs_open", "id", info={PARTIAL_INDEX_WHERE: "status = 'open'"}))
    await database.create_tables(table.metadata)
    await database.create_tables(table.metadata)  # and again over the existing table: nothing to add
    if database.dialect == "sqlite":
        row = await database.fetch_one(sa.text("SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_open'"))
        definition = row["sql"] if row is not None else ""
    else:
        row = await database.fetch_one(sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_open' AND schemaname = :schema"),
                                       {"schema": backend.schema})
        definition = row["indexdef"] if row is not None else ""
    assert "WHERE" in definition and "open" in definition, definition


def test_stores_on_sqlite_do_not_import_the_postgresql_dialect() -> None:
    # It costs 22 ms at start-up and several MiB; a stack on SQLite has no use for it.
    code = ("import sys; import providers.responses.store, providers.conversations.store, runtime.apis.inference.store; "
            "loaded = [name for name in sys.modules if name.startswith('sqlalchemy.dialects.postgresql')]; "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])
