"""`Database` and `Storage` on SQLite and (where it is reachable) PostgreSQL: statements and transactions,
JSON and the NUL character, concurrent writers and readers, cancelled writers, the backends of a stack.
(The tables' creation and additive migrations: test_schema.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlean  # type: ignore[import-untyped]

from builder.config import PostgresBackend, SqliteBackend, StorageConfig, StoresConfig
from contract.errors import InvalidRequestError
from runtime.storage import INTEGER, Column, Database, Index, IntegrityError, Sql, Storage, String, Table, loads, open_database, table
from runtime.storage.postgres import asyncpg_dsn
from support.storage import PG_DSN, HeldOpen, ids_of, loop_errors, pg_admin

INSERT_ID = Sql("INSERT INTO items (id, n) VALUES (:id, 0)")  # (a declared default is given by the inserts of declared tables, not by SQL)


async def test_read_one_read_all_and_write_one_run_one_statement(database: Database, ready: Table) -> None:
    add = Sql("INSERT INTO items (id, n) VALUES (:id, :n)")
    assert await database.write_one(add, {"id": "a", "n": 1}) == 1
    await database.write_one(add, {"id": "b", "n": 2})
    assert await database.read_one(Sql("SELECT id, n, payload FROM items WHERE id = :id"), {"id": "b"}) == ("b", 2, None)
    assert await database.read_one(Sql("SELECT id FROM items WHERE id = :id"), {"id": "z"}) is None
    assert await database.read_all(Sql("SELECT id, n FROM items ORDER BY id")) == [("a", 1), ("b", 2)]
    assert await database.read_all(Sql("SELECT id FROM items WHERE n > 5")) == []
    assert await database.write_one(Sql("UPDATE items SET n = 9")) == 2  # the rows it matched
    assert await database.write_one(Sql("DELETE FROM items WHERE id = 'z'")) == 0


async def test_a_write_is_committed_whole_or_rolled_back_whole(database: Database, ready: Table) -> None:
    def fails_after_writing(connection: Any) -> None:
        INSERT_ID.run(connection, {"id": "a"})
        INSERT_ID.run(connection, {"id": "b"})
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await database.write(fails_after_writing)
    assert await ids_of(database, ready) == []

    def two(connection: Any) -> str:
        INSERT_ID.run(connection, {"id": "c"})
        INSERT_ID.run(connection, {"id": "d"})
        return "done"

    assert await database.write(two) == "done"  # what the work returns
    assert await ids_of(database, ready) == ["c", "d"]
    assert database.connections_in_use == 0


async def test_upsert_inserts_then_updates_the_columns_given(database: Database, ready: Table) -> None:
    await database.upsert(ready, {"id": "a", "n": 1, "payload": {"v": 1}}, key=["id"])
    await database.upsert(ready, {"id": "a", "n": 2, "payload": {"v": 2}}, key=["id"])
    await database.upsert(ready, {"id": "a"}, key=["id"])  # key only: nothing to update
    await database.upsert(ready, {"id": "b", "payload": [1]}, key=["id"])  # inserted: n takes its declared default
    await database.upsert(ready, {"id": "b", "n": 3}, key=["id"])  # updated: the payload left out is left as it is
    rows = await database.read_all(Sql("SELECT id, n, CAST(payload AS TEXT) FROM items ORDER BY id"))
    assert [(item_id, n, loads(payload)) for item_id, n, payload in rows] == [("a", 2, {"v": 2}), ("b", 3, [1])]
    await database.upsert(ready, {"id": "c"}, key=["id"])
    assert await database.read_one(Sql("SELECT n, payload FROM items WHERE id = 'c'")) == (0, None)
    with pytest.raises(ValueError):
        await database.upsert(ready, {"n": 3}, key=["id"])
    with pytest.raises(ValueError):
        await database.upsert(ready, {"id": "d"}, key=[])


async def test_json_round_trip(database: Database, ready: Table) -> None:
    payload = {"a": [1, 2.5, {"b": None, "c": [True, False]}], "s": "é\n\"", "empty": {}}
    add = Sql("INSERT INTO items (id, n, payload) VALUES (:id, 0, :payload)", json=["payload"])
    await database.write_one(add, {"id": "j", "payload": payload})
    await database.write_one(add, {"id": "l", "payload": [{"x": [[]]}, "y"]})
    await database.write_one(add, {"id": "s", "payload": "just text"})
    await database.write_one(add, {"id": "none", "payload": None})  # SQL NULL, not JSON null
    read = Sql("SELECT CAST(payload AS TEXT) FROM items WHERE id = :id")
    decoded = {key: loads((await database.read_one(read, {"id": key}) or ("",))[0]) for key in ("j", "l", "s", "none")}
    assert decoded == {"j": payload, "l": [{"x": [[]]}, "y"], "s": "just text", "none": None}
    assert await database.read_all(Sql("SELECT id FROM items WHERE payload IS NULL")) == [("none",)]


async def test_text_holding_a_nul_character_is_kept_in_json_and_a_400_elsewhere(database: Database, ready: Table) -> None:
    # PostgreSQL's text and JSONB hold no U+0000, which JSON, OpenAI and SQLite take: in JSON it is
    # kept as U+FFFD (a literal backslash before "u0000" stays as it was); a key holding one is the
    # request's 400, never a server error.
    payload = {"text": "a\x00b", "escaped": "c\\u0000d", "both": ["\\\x00"]}
    await database.write_one(Sql("INSERT INTO items (id, n, payload) VALUES (:id, 0, :payload)", json=["payload"]), {"id": "nul", "payload": payload})
    row = await database.read_one(Sql("SELECT CAST(payload AS TEXT) FROM items WHERE id = 'nul'"))
    assert row is not None
    lookup = Sql("SELECT payload FROM items WHERE id = :id")
    if database.dialect == "postgresql":
        assert loads(row[0]) == {"text": "a\ufffdb", "escaped": "c\\u0000d", "both": ["\\\ufffd"]}
        with pytest.raises(InvalidRequestError, match="null character") as refused:
            await database.read_one(lookup, {"id": "x\x00"})
        assert (refused.value.status, refused.value.code) == (400, "invalid_value")
        with pytest.raises(InvalidRequestError, match="null character"):
            await database.write_one(INSERT_ID, {"id": "y\x00"})
        with pytest.raises(InvalidRequestError, match="null character"):  # in a transaction, too
            await database.write(lambda connection: INSERT_ID.run(connection, {"id": "y\x00"}))
        assert database.connections_in_use == 0
    else:
        assert loads(row[0]) == payload
        assert await database.read_one(lookup, {"id": "x\x00"}) is None
        await database.write_one(INSERT_ID, {"id": "y\x00"})
    assert await database.read_one(lookup, {"id": "nul"}) is not None  # the refusal left the connection usable


async def test_reads_are_not_blocked_by_an_open_write(database: Database, ready: Table) -> None:
    await database.write_one(INSERT_ID, {"id": "a"})
    holding = HeldOpen((INSERT_ID, {"id": "b"}))
    write = asyncio.create_task(database.write(holding))
    try:
        await holding.entered()
        # Reads run on other connections and see only committed rows.
        assert await asyncio.wait_for(ids_of(database, ready), 5) == ["a"]
        assert await asyncio.wait_for(database.read_all(Sql("SELECT id FROM items WHERE id = 'b'")), 5) == []
    finally:
        holding.release()
    assert await write == 1
    assert await ids_of(database, ready) == ["a", "b"]


async def test_concurrent_writes_and_reads_all_complete(database: Database, ready: Table) -> None:
    tasks, per_task = 32, 32  # 1,024 write transactions
    add = Sql("INSERT INTO items (id, n) VALUES (:id, :n)")

    def adding(key: str, n: int) -> Callable[[Any], int]:
        def work(connection: Any) -> int:  # two statements in one transaction
            add.run(connection, {"id": key, "n": n})
            return int(Sql("SELECT count(*) FROM items WHERE id = :id").run(connection, {"id": key}).scalar())
        return work

    async def worker(t: int) -> None:
        for i in range(per_task):
            key = f"{t:02d}-{i:02d}"
            if i % 4 == 0:
                await database.write_one(add, {"id": key, "n": i})
            elif i % 4 == 1:
                await database.upsert(ready, {"id": key, "n": i, "payload": [t, i]}, key=["id"])
            elif i % 4 == 2:
                assert await database.write(adding(key, i), small=True) == 1
            else:
                assert await database.write(adding(key, i)) == 1
            if i % 4 == 0:
                await database.read_all(Sql("SELECT id FROM items WHERE n = :n"), {"n": i})
            elif i % 4 == 1:
                await database.read_one(Sql("SELECT id FROM items WHERE id = :id"), {"id": key})

    await asyncio.wait_for(asyncio.gather(*(worker(t) for t in range(tasks))), 60)
    assert await database.read_one(Sql("SELECT count(*) FROM items")) == (tasks * per_task,)
    assert await ids_of(database, ready) == sorted(f"{t:02d}-{i:02d}" for t in range(tasks) for i in range(per_task))
    assert database.connections_in_use == 0


async def test_a_write_cancelled_while_it_waits_for_a_lock_leaves_nothing_held(database: Database, ready: Table) -> None:
    holding = HeldOpen((INSERT_ID, {"id": "held"}))
    held = asyncio.create_task(database.write(holding))
    await holding.entered()
    # On SQLite this waits for the write lock (queued, not begun); on PostgreSQL, under way, for the
    # row lock on "held".
    waiting = asyncio.create_task(database.write(lambda connection: INSERT_ID.run(connection, {"id": "held"}).rowcount))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    with loop_errors() as errors:
        waiting.cancel()
        holding.release()
        assert await held == 1
        # Never made on SQLite; on PostgreSQL made to its end (a duplicate, rolled back), then the
        # cancellation raised: its failure is not the caller's any more, nor an error to log.
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(waiting), 5)
        del waiting  # (its cancellation's traceback holds the write under way)
    assert errors == []
    assert await asyncio.wait_for(database.write_one(INSERT_ID, {"id": "later"}), 5) == 1
    assert await ids_of(database, ready) == ["held", "later"]
    assert database.connections_in_use == 0


async def test_a_write_that_fails_while_others_wait_for_it_is_rolled_back_and_they_are_made(database: Database, ready: Table) -> None:
    holding = HeldOpen((INSERT_ID, {"id": "held"}))
    held = asyncio.create_task(database.write(holding))
    await holding.entered()
    queued = asyncio.create_task(database.write_one(INSERT_ID, {"id": "queued"}))  # waits for the write lock on SQLite
    clashing = asyncio.create_task(database.write_one(INSERT_ID, {"id": "held"}))  # for the row lock on PostgreSQL
    await asyncio.sleep(0.05)
    assert not clashing.done()
    holding.release(RuntimeError("the holder failed"))
    with pytest.raises(RuntimeError, match="the holder failed"):
        await held
    assert await asyncio.wait_for(queued, 5) == 1
    assert await asyncio.wait_for(clashing, 5) == 1  # its "held" was rolled back: no duplicate
    assert await ids_of(database, ready) == ["held", "queued"]
    assert database.connections_in_use == 0


async def test_a_failing_write_among_concurrent_ones_fails_alone(database: Database, ready: Table) -> None:
    # On SQLite these are committed as a group; the duplicate key must still fail on its own
    # and leave the other writes of its group committed.
    await database.write_one(INSERT_ID, {"id": "taken"})

    def insert(key: str) -> Any:
        return lambda connection: INSERT_ID.run(connection, {"id": key}).rowcount

    results = await asyncio.gather(*(database.write(insert(key)) for key in ["a", "b", "taken", "c", "d"]), return_exceptions=True)
    assert [r if not isinstance(r, BaseException) else "error" for r in results] == [1, 1, "error", 1, 1]
    failed = results[2]
    assert isinstance(failed, IntegrityError)
    assert isinstance(failed.orig, sqlean.IntegrityError if database.dialect == "sqlite" else asyncpg.UniqueViolationError)
    assert await ids_of(database, ready) == ["a", "b", "c", "d", "taken"]


async def test_a_partial_index_is_partial_on_either_database(database: Database) -> None:
    jobs = table("jobs", Column("id", INTEGER, primary_key=True), Column("status", String(16)),
                 Index("ix_jobs_open", ("id",), where="status = 'open'"))
    await database.create_tables([jobs])
    await database.create_tables([jobs])  # and again over the existing table: nothing to add
    if database.dialect == "sqlite":
        row = await database.read_one(Sql("SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_open'"))
    else:
        row = await database.read_one(Sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_open' AND schemaname = current_schema()"))
    definition = row[0] if row is not None else ""
    assert "WHERE" in definition and "open" in definition, definition


async def test_a_closed_database_connects_again_when_used(database: Database, ready: Table) -> None:
    await database.write_one(INSERT_ID, {"id": "a"})
    await database.close()
    await database.write_one(INSERT_ID, {"id": "b"})
    assert await ids_of(database, ready) == ["a", "b"]
    assert await database.ping() is None


async def test_a_notification_reaches_the_subscribers_of_its_channel_in_this_process_and_others(
        backend: SqliteBackend | PostgresBackend) -> None:
    # By LISTEN/NOTIFY on PostgreSQL; on SQLite, in this process directly and to the others sharing
    # the file by the machine's sockets. A second Database stands for another process.
    here, there = open_database(backend), open_database(backend)
    channel = f"stack_test_{uuid.uuid4().hex[:8]}"
    heard_here: list[str] = []
    heard_there: list[str] = []
    elsewhere: list[str] = []
    try:
        await here.subscribe(channel, heard_here.append)
        await here.subscribe(channel + "_other", elsewhere.append)
        await there.subscribe(channel, heard_there.append)
        for payload in ("hello", "again"):
            await here.notify(channel, payload)
            async with asyncio.timeout(5):
                while payload not in heard_here or payload not in heard_there:
                    await asyncio.sleep(0.01)
        assert heard_here == heard_there == ["hello", "again"]  # each once, in order
        assert elsewhere == []
    finally:
        await here.close()
        await there.close()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+asyncpg"])
async def test_a_postgres_dsn_of_each_scheme_is_given_to_asyncpg_with_its_password(scheme: str) -> None:
    assert asyncpg_dsn(f"{scheme}://u:p%40ss@db:5432/x?sslmode=disable") == "postgresql://u:p%40ss@db:5432/x?sslmode=disable"
    db = open_database(PostgresBackend(type="postgres", dsn=f"{scheme}://u:p%40ss@db:5432/x", pool_size=3))
    try:
        assert db.dialect == "postgresql"
        assert db._pg is not None and (db._pg.dsn, db._pg.size) == ("postgresql://u:p%40ss@db:5432/x", 3)
        assert db.connections_in_use == 0  # opened, not connected
    finally:
        await db.close()


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgres", "postgresql+asyncpg"])
async def test_asyncpg_connects_by_a_dsn_of_any_postgres_scheme(scheme: str) -> None:
    await (await pg_admin()).close()  # (skipped where PostgreSQL is not reachable)
    db = open_database(PostgresBackend(type="postgres", dsn=PG_DSN.replace("postgresql", scheme, 1)))
    try:
        assert await db.read_one(Sql("SELECT 1")) == (1,)
    finally:
        await db.close()


def test_non_postgres_dsn_is_rejected_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="mysql") as error:
        open_database(PostgresBackend(type="postgres", dsn="mysql://u:secret@h/db"))
    assert "secret" not in str(error.value)
    with pytest.raises(ValueError, match="'sqlite'") as error:
        asyncpg_dsn("sqlite:///u:secret.db")
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
        files = storage.database("files")
        assert files.dialect == "postgresql" and files.connections_in_use == 0  # opened, not connected
        default = storage.database("chat_completions")
        assert storage.database("metadata") is default and default is not main
        await default.write_one(Sql("CREATE TABLE t (x INTEGER)"))
        assert (tmp_path / "state" / "default.db").exists()
        await main.write_one(Sql("CREATE TABLE t (x INTEGER)"))
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
        await storage.database("responses").write_one(Sql("CREATE TABLE t (x INTEGER)"))
        assert (tmp_path / "declared.db").exists()
        assert not (tmp_path / "unused.db").exists()
        with pytest.raises(ValueError, match="'nope'"):
            storage.database("files")
    finally:
        await storage.close()


async def test_storage_health_says_each_opened_backend_s_state(tmp_path: Path, unused_tcp_port: int) -> None:
    config = StorageConfig(
        backends={"main": SqliteBackend(type="sqlite", path=tmp_path / "main.db"),
                  "away": PostgresBackend(type="postgres", dsn=f"postgresql://postgres@127.0.0.1:{unused_tcp_port}/none", connect_timeout_s=1)},
        stores=StoresConfig(responses="main", files="away"))
    storage = Storage(config, default_sqlite_path=tmp_path / "unused.db")
    try:
        assert await storage.health() == {}  # none opened yet
        storage.database("responses")
        storage.database("files")
        health = await storage.health()
        assert health["main"] == {"status": "ok", "dialect": "sqlite", "detail": None}
        assert health["away"]["status"] == "unavailable" and health["away"]["dialect"] == "postgresql"
        assert health["away"]["detail"].startswith("the database could not be reached")
    finally:
        await storage.close()


def test_stores_on_sqlite_load_neither_SQLAlchemy_nor_asyncpg_nor_greenlet() -> None:
    # SQLAlchemy cost a quarter of the start-up and 12 MiB; asyncpg and greenlet serve PostgreSQL only.
    # A module is told by the distribution that installed it.
    code = """
import asyncio, importlib.metadata, sys, tempfile
from pathlib import Path
import providers.responses.store, providers.conversations.store, runtime.apis.inference.store, providers.files.local
import providers.prompts, runtime.security.keys, runtime.security.access, runtime.storage
from builder.config import SqliteBackend
from runtime.storage import INTEGER, JSON, Column, InsertRows, Sql, open_database, table

async def use() -> None:
    db = open_database(SqliteBackend(type="sqlite", path=Path(tempfile.mkdtemp()) / "s.db"))
    rows = table("rows", Column("k", INTEGER, primary_key=True), Column("doc", JSON))
    await db.create_tables([rows])
    await db.write(InsertRows((rows, [{"k": 1, "doc": {"a": 1}}])), small=True)
    await db.write(InsertRows((rows, [{"k": 2, "doc": None}])))
    await db.upsert(rows, {"k": 1, "doc": [1]}, key=["k"])
    assert await db.read_all(Sql("SELECT k FROM rows ORDER BY k")) == [(1,), (2,)]
    assert await db.read_one(Sql("SELECT k FROM rows WHERE k = 2")) == (2,)
    assert await db.ping() is None
    await db.close()

asyncio.run(use())
installed_by = importlib.metadata.packages_distributions()
assert installed_by["greenlet"] == ["greenlet"]  # (the check below can see them)
loaded = {distribution for name in list(sys.modules) for distribution in installed_by.get(name.split(".")[0], ())}
unwanted = sorted(loaded & {"SQLAlchemy", "asyncpg", "greenlet"})
assert not unwanted, unwanted
assert "sqlean.py" in loaded
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[4])
