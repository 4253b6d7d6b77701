"""The storage layer, against SQLite and (where it is reachable) PostgreSQL."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple, cast

import asyncpg
import pytest
import sqlalchemy as sa
import sqlean  # type: ignore[import-untyped]

from builder.config import PostgresBackend, SqliteBackend, StorageConfig, StoresConfig
from runtime import auth
from runtime.auth import Principal
from runtime.storage import PARTIAL_INDEX_WHERE, Database, InsertRows, Prepared, Storage, for_caller, insert_into, json_type, open_database

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


class Backend(NamedTuple):
    config: SqliteBackend | PostgresBackend
    schema: str | None  # the fresh PostgreSQL schema this test's tables live in


async def _pg_admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncio.TimeoutError) as error:
        pytest.skip(f"PostgreSQL not reachable at 127.0.0.1:5432: {error}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield Backend(SqliteBackend(type="sqlite", path=tmp_path / "nested" / "stack.db"), None)
        return
    admin = await _pg_admin()
    schema = f"test_storage_{uuid.uuid4().hex[:12]}"
    try:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        yield Backend(PostgresBackend(type="postgres", dsn=PG_DSN, pool_size=10), schema)
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


@pytest.fixture
async def database(backend: Backend) -> AsyncIterator[Database]:
    db = open_database(backend.config)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def items(backend: Backend) -> sa.Table:
    return sa.Table(
        "items",
        sa.MetaData(schema=backend.schema),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False, server_default="0"),
        sa.Column("payload", json_type(), nullable=True),
    )


@pytest.fixture
async def ready(database: Database, items: sa.Table) -> sa.Table:
    await database.create_tables(items.metadata)
    return items


def _checked_out(database: Database) -> int:
    """Connections in use: out of the pool, and not kept idle for the next use."""
    pool: Any = database.engine.pool
    return int(pool.checkedout()) - database.kept_connections


class SqliteKeys(NamedTuple):
    db: Database
    table: sa.Table  # "t": an integer primary key "k", created


@pytest.fixture
async def keys_db(tmp_path: Path) -> AsyncIterator[SqliteKeys]:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    table = sa.Table("t", sa.MetaData(), sa.Column("k", sa.Integer, primary_key=True))
    try:
        await db.create_tables(table.metadata)
        yield SqliteKeys(db, table)
    finally:
        await db.close()


class _Fired:
    """How many times an SQLAlchemy event of `target` (an engine, a pool) fired since this was made."""

    def __init__(self, target: Any, event: str) -> None:
        self.count = 0
        sa.event.listen(target, event, self._fired)

    def _fired(self, *_args: Any) -> None:
        self.count += 1


async def _ids(database: Database, items: sa.Table) -> list[str]:
    rows = await database.fetch_all(sa.select(items.c.id).order_by(items.c.id))
    return [row["id"] for row in rows]


async def test_create_tables_is_idempotent(database: Database, items: sa.Table) -> None:
    await database.create_tables(items.metadata)
    await database.execute(items.insert().values(id="a"))
    await database.create_tables(items.metadata)
    assert await _ids(database, items) == ["a"]


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
    assert await _ids(database, ready) == []
    async with database.transaction() as conn:
        await conn.execute(ready.insert().values(id="c"))
    assert await _ids(database, ready) == ["c"]
    assert _checked_out(database) == 0


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


async def test_reads_are_not_blocked_by_an_open_write(
    database: Database, ready: sa.Table
) -> None:
    await database.execute(ready.insert().values(id="a"))
    async with database.transaction() as conn:
        await conn.execute(ready.insert().values(id="b"))
        # Reads run on other connections and see only committed rows.
        assert await asyncio.wait_for(_ids(database, ready), 5) == ["a"]
    assert await _ids(database, ready) == ["a", "b"]


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
    ids = await _ids(database, ready)
    assert ids == sorted(f"{t:02d}-{i:02d}" for t in range(tasks) for i in range(per_task))
    assert _checked_out(database) == 0


async def test_sqlite_read_then_write_transactions_serialize(tmp_path: Path) -> None:
    # Deferred transactions that read and then write would fail with "database is locked"
    # on lock upgrade and lose updates; write transactions here are serialized and IMMEDIATE.
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    counter = sa.Table("counter", sa.MetaData(), sa.Column("n", sa.Integer, nullable=False))
    try:
        await db.create_tables(counter.metadata)
        await db.execute(counter.insert().values(n=0))

        async def increment() -> None:
            for _ in range(4):
                async with db.transaction() as conn:
                    n = (await conn.execute(sa.select(counter.c.n))).scalar_one()
                    await conn.execute(counter.update().values(n=n + 1))

        await asyncio.wait_for(asyncio.gather(*(increment() for _ in range(32))), 30)
        row = await db.fetch_one(sa.select(counter.c.n))
        assert row is not None and row["n"] == 128
    finally:
        await db.close()


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
    assert await _ids(database, ready) == ["held", "later"]
    assert _checked_out(database) == 0


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
    assert await _ids(database, ready) == ["later", "queued"]
    assert _checked_out(database) == 0


async def test_sqlite_connection_settings(tmp_path: Path) -> None:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "a" / "b" / "s.db"))
    try:
        assert db.dialect == "sqlite"
        async with db.read() as conn:
            values = [
                (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
            ]
        assert values == ["wal", 1, 5000, 1]
        assert (tmp_path / "a" / "b" / "s.db").exists()
    finally:
        await db.close()


async def test_sqlite_nested_write_transaction_raises(tmp_path: Path) -> None:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    try:
        async with db.transaction():
            # asyncio.timeout, not wait_for: the inner write must run in this same task.
            with pytest.raises(RuntimeError, match="nested"):
                async with asyncio.timeout(5):
                    await db.execute(sa.text("SELECT 1"))
        assert await db.execute(sa.text("CREATE TABLE t (x INTEGER)")) is not None
    finally:
        await db.close()


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
    assert await _ids(database, ready) == ["a", "b", "c", "d", "taken"]


async def test_sqlite_concurrent_writes_share_commits(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    assert db._sync is not None
    commits = _Fired(db._sync, "commit")
    await asyncio.gather(*(db.execute(table.insert().values(k=k)) for k in range(64)))
    rows = await db.fetch_all(sa.select(table.c.k).order_by(table.c.k))
    assert [row["k"] for row in rows] == list(range(64))
    # The first write runs alone; the rest queue behind it and go in as few groups.
    assert commits.count <= 4, commits.count


async def test_sqlite_a_write_cancelled_while_queued_is_not_made(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    async with db.transaction():  # holds the write lock: the writes below queue
        queued = [asyncio.create_task(db.execute(table.insert().values(k=k))) for k in range(3)]
        await asyncio.sleep(0.05)
        queued[1].cancel()
    assert [await queued[0], await queued[2]] == [1, 1]
    assert queued[1].cancelled()
    rows = await db.fetch_all(sa.select(table.c.k).order_by(table.c.k))
    assert [row["k"] for row in rows] == [0, 2]


async def test_sqlite_writes_held_by_a_stopped_committer_fail_rather_than_hang(keys_db: SqliteKeys) -> None:
    db, table = keys_db

    def slow_insert(k: int) -> Any:
        def work(conn: sa.Connection) -> int:
            time.sleep(0.2)
            return conn.execute(table.insert().values(k=k)).rowcount
        return work

    first = asyncio.create_task(db.write(slow_insert(1)))  # runs at once, alone
    await asyncio.sleep(0.05)
    grouped = [asyncio.create_task(db.write(slow_insert(k))) for k in (2, 3)]  # queue behind it
    await asyncio.sleep(0.3)  # the committer has taken them and is running the group
    assert db._committer is not None
    db._committer.cancel()  # as at a shutdown
    assert await first == 1
    for task in grouped:
        with pytest.raises(RuntimeError, match="stopped"):
            await asyncio.wait_for(task, 2)


async def test_inserts_queued_together_go_in_as_one_statement_a_table_and_a_failing_one_fails_alone(
    database: Database, ready: sa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    await database.execute(ready.insert().values(id="taken"))
    inserts: list[int] = []  # rows per statement run
    run = Prepared.run

    def seen(self: Prepared, connection: sa.Connection, params: Any) -> Any:
        inserts.append(len(params) if isinstance(params, list) else 1)
        return run(self, connection, params)

    monkeypatch.setattr(Prepared, "run", seen)
    writes = [database.write(InsertRows((ready, [{"id": f"{key}-1"}, {"id": f"{key}-2"}]))) for key in "abcd"]
    results = await asyncio.gather(*writes)
    assert results == [None] * 4
    if database.dialect == "sqlite":  # the first write runs alone, the three queued behind it together
        assert inserts == [2, 6], inserts
    failing = await asyncio.gather(
        *(database.write(InsertRows((ready, [{"id": key}]))) for key in ["e", "taken", "f"]), return_exceptions=True)
    assert failing[0] is None and failing[2] is None and isinstance(failing[1], sa.exc.IntegrityError)
    assert await _ids(database, ready) == sorted([f"{key}-{n}" for key in "abcd" for n in (1, 2)] + ["e", "f", "taken"])


def _insert_noting_thread(table: sa.Table, k: int, threads: list[str]) -> Any:
    def work(conn: sa.Connection) -> int:
        threads.append(threading.current_thread().name)
        return conn.execute(table.insert().values(k=k)).rowcount
    return work


async def test_sqlite_small_writes_are_made_on_the_event_loop_in_groups_and_large_ones_on_the_writer_thread(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    threads: list[str] = []
    assert db._sync is not None
    commits = _Fired(db._sync, "commit")
    assert await db.write(_insert_noting_thread(table, 0, threads), small=True) == 1
    assert threads == [threading.current_thread().name]
    # Small writes queued in the same turn of the loop go in together, in one commit.
    assert await asyncio.gather(*(db.write(_insert_noting_thread(table, k, threads), small=True) for k in range(1, 33))) == [1] * 32
    assert set(threads) == {threading.current_thread().name}
    assert commits.count == 2
    threads.clear()
    assert await db.write(_insert_noting_thread(table, 33, threads)) == 1
    assert threads[0].startswith("stack-sqlite-write")
    # A small write queued with a large one goes with it to the writer thread.
    threads.clear()
    await asyncio.gather(db.write(_insert_noting_thread(table, 34, threads), small=True), db.write(_insert_noting_thread(table, 35, threads)))
    assert all(name.startswith("stack-sqlite-write") for name in threads), threads
    rows = await db.fetch_all(sa.select(table.c.k).order_by(table.c.k))
    assert [row["k"] for row in rows] == list(range(36))


async def test_sqlite_a_small_write_waits_on_the_writer_thread_while_another_process_writes(keys_db: SqliteKeys, tmp_path: Path) -> None:
    db, table = keys_db
    threads: list[str] = []
    # Another open file description of the lock file stands for another process: flock
    # locks belong to the open file, so this one excludes the database's own as a process would.
    other = os.open(tmp_path / "s.db.write-lock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        write = asyncio.create_task(db.write(_insert_noting_thread(table, 1, threads), small=True))
        await asyncio.sleep(0.2)
        # The loop went on (this test runs on it) and the write waits, on the writer thread.
        assert not write.done()
        fcntl.flock(other, fcntl.LOCK_UN)
        assert await asyncio.wait_for(write, 5) == 1
    finally:
        os.close(other)
    assert threads[0].startswith("stack-sqlite-write")
    assert await db.write(_insert_noting_thread(table, 2, threads), small=True) == 1
    assert threads[1] == threading.current_thread().name


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


DOC = {"text": "é \"q\" 🙂", "list": [1, 2.5, None, True], "nested": {"a": {}}}  # JSON that escapes and nests


@pytest.fixture
async def docs(database: Database, backend: Backend) -> sa.Table:
    table = sa.Table("docs", sa.MetaData(schema=backend.schema), sa.Column("id", sa.String(16), primary_key=True),
                     sa.Column("kind", sa.String(8), nullable=False), sa.Column("n", sa.Integer, nullable=False, default=7),
                     sa.Column("doc", json_type(), nullable=True))
    await database.create_tables(table.metadata)
    return table


async def test_prepared_statements_write_what_sqlalchemy_would(database: Database, docs: sa.Table) -> None:
    table, doc = docs, DOC
    bump = Prepared(table.update().where(table.c.id == sa.bindparam("key"), table.c.kind == "live")
                    .values(n=table.c.n + sa.bindparam("by", type_=sa.Integer)).returning(table.c.n))
    drop = Prepared(table.delete().where(table.c.id.in_(sa.bindparam("keys", expanding=True))))  # SQLAlchemy's own way

    def work(connection: sa.Connection) -> list[Any]:
        insert = insert_into(table)
        insert.run(connection, [{"id": "p1", "kind": "live", "n": 1, "doc": doc}, {"id": "p2", "kind": "dead", "n": 1, "doc": None}])
        insert.run(connection, {"id": "p3", "kind": "live", "doc": doc})  # n from its column default
        connection.execute(table.insert(), {"id": "s1", "kind": "live", "n": 1, "doc": doc})  # the same through SQLAlchemy
        return [bump.run(connection, {"key": "p1", "by": 5}), bump.run(connection, {"key": "p2", "by": 5}),
                drop.run(connection, {"keys": ["p3", "nobody"]})]

    raised, dead, dropped = await database.write(work)
    assert (raised.rows, raised.scalar(), raised.rowcount) == ([(6,)], 6, 1)
    assert (dead.rows, dead.scalar(), dead.rowcount) == ([], None, 0)  # its kind is not "live"
    assert dropped.rowcount == 1
    rows = {row["id"]: dict(row) for row in await database.fetch_all(sa.select(table))}
    assert rows == {"p1": {"id": "p1", "kind": "live", "n": 6, "doc": doc}, "p2": {"id": "p2", "kind": "dead", "n": 1, "doc": None},
                    "s1": {"id": "s1", "kind": "live", "n": 1, "doc": doc}}
    texts = {row["id"]: row["text"] for row in await database.fetch_all(sa.select(table.c.id, sa.cast(table.c.doc, sa.Text).label("text")))}
    assert texts["p1"] == texts["s1"]  # the same serializer
    with pytest.raises(sa.exc.IntegrityError):
        await database.write(lambda connection: insert_into(table).run(connection, {"id": "p1", "kind": "live", "n": 1, "doc": None}))


async def test_prepared_statements_each_on_its_own_do_what_sqlalchemy_would(database: Database, docs: sa.Table) -> None:
    # One statement a write (autocommit on PostgreSQL) and reads: asyncpg runs them directly there.
    table, doc = docs, DOC
    insert = insert_into(table)
    bump = Prepared(table.update().where(table.c.id == sa.bindparam("key")).values(n=table.c.n + sa.bindparam("by", type_=sa.Integer))
                    .returning(table.c.n))
    retire = Prepared(table.update().where(table.c.kind == sa.bindparam("was")).values(kind="dead"))
    live = Prepared(sa.select(table.c.id, table.c.n).where(table.c.kind == sa.bindparam("kind")).order_by(table.c.id))

    async def alone(statement: Prepared, params: Any) -> Any:
        return await database.write(lambda connection: statement.run(connection, params), one_statement=True)

    assert (await alone(insert, [{"id": "p1", "kind": "live", "n": 1, "doc": doc}, {"id": "p2", "kind": "old", "n": 1, "doc": None}])).rowcount == 2
    assert (await alone(insert, {"id": "p3", "kind": "live", "doc": doc})).rowcount == 1  # n from its column default: SQLAlchemy's
    raised = await alone(bump, {"key": "p1", "by": 5})
    assert (raised.rows, raised.scalar(), raised.rowcount) == ([(6,)], 6, 1)
    assert (await alone(bump, {"key": "nobody", "by": 5})).rows == []
    assert (await alone(retire, {"was": "old"})).rowcount == 1
    assert (await alone(retire, {"was": "none"})).rowcount == 0
    assert await database.read_with(lambda connection: live.run(connection, {"kind": "live"}).rows) == [("p1", 6), ("p3", 7)]
    with pytest.raises(sa.exc.IntegrityError):
        await alone(insert, {"id": "p1", "kind": "live", "n": 1, "doc": None})
    assert await database.read_with(lambda connection: live.run(connection, {"kind": "dead"}).rows) == [("p2", 1)]
    rows = {row["id"]: row["doc"] for row in await database.fetch_all(sa.select(table))}
    assert rows == {"p1": doc, "p2": None, "p3": doc}
    assert bump._compiled[(database.dialect, "key", "by")] is not None  # run on the driver, not by SQLAlchemy


async def test_prepared_statements_write_and_read_json_as_sqlalchemy_does(database: Database, docs: sa.Table) -> None:
    # None in a JSON column is JSON null, as SQLAlchemy writes it, not SQL NULL; a JSON column read
    # comes back decoded on both databases (the drivers would give text on one, objects on the other).
    table, doc = docs, DOC
    read = Prepared(sa.select(table.c.id, table.c.doc).order_by(table.c.id))
    sql_nulls = sa.select(sa.func.count().label("nulls")).select_from(table).where(table.c.doc.is_(None))

    def work(connection: sa.Connection) -> None:
        insert_into(table).run(connection, {"id": "p1", "kind": "live", "n": 1, "doc": None})
        connection.execute(table.insert(), {"id": "s1", "kind": "live", "n": 1, "doc": None})  # SQLAlchemy's own insert

    await database.write(work)
    await database.write(lambda connection: insert_into(table).run(connection, {"id": "p2", "kind": "live", "n": 1, "doc": None}),
                         one_statement=True)  # on asyncpg directly, on PostgreSQL
    await database.write(lambda connection: insert_into(table).run(connection, {"id": "p3", "kind": "live", "n": 1, "doc": doc}),
                         one_statement=True)
    assert [row["nulls"] for row in await database.fetch_all(sql_nulls)] == [0]
    texts = {row["id"]: row["text"] for row in await database.fetch_all(sa.select(table.c.id, sa.cast(table.c.doc, sa.Text).label("text")))}
    assert texts["p1"] == texts["p2"] == texts["s1"] and texts["p1"] is not None
    for step in (lambda: database.read_with(lambda connection: read.run(connection, {}).rows),
                 lambda: database.write(lambda connection: read.run(connection, {}).rows, one_statement=True)):
        assert await step() == [("p1", None), ("p2", None), ("p3", doc), ("s1", None)]


async def test_sqlite_small_reads_are_made_on_the_event_loop_and_others_on_a_reading_thread(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    threads: list[str] = []

    def read(connection: sa.Connection) -> list[int]:
        threads.append(threading.current_thread().name)
        return [row.k for row in connection.execute(sa.select(table.c.k).order_by(table.c.k))]

    await db.write(lambda connection: insert_into(table).run(connection, [{"k": 1}, {"k": 2}]), small=True)
    async with db.transaction():  # a write under way: a reader in WAL mode does not wait for it
        assert await db.read_with(read, small=True) == [1, 2]
    assert await db.read_with(read) == [1, 2]
    assert threads[0] == threading.current_thread().name and threads[1].startswith("stack-sqlite-read")


async def test_sqlite_writes_and_small_reads_keep_one_connection_each_and_a_failure_gives_its_connection_back(keys_db: SqliteKeys) -> None:
    db, table = keys_db

    def read(connection: sa.Connection) -> list[int]:
        return [row.k for row in connection.execute(sa.select(table.c.k).order_by(table.c.k))]

    assert db._sync is not None
    checkouts = _Fired(db._sync.pool, "checkout")
    for k in range(5):
        await db.write(_insert_noting_thread(table, k, []), small=True)
        await db.write(_insert_noting_thread(table, 100 + k, []))  # on the writer thread, the same connection
        # Each small read ends its transaction: the next one sees the write made since.
        assert (await db.read_with(read, small=True))[-1] == 100 + k
    assert checkouts.count == 1  # the reading one; the writing one was taken by create_tables
    with pytest.raises(sa.exc.IntegrityError):
        await db.write(_insert_noting_thread(table, 0, []), small=True)
    # The failed write's connection went back to the pool; the next write takes another, and works.
    assert await db.write(_insert_noting_thread(table, 5, []), small=True) == 1
    assert checkouts.count == 2
    with pytest.raises(sa.exc.OperationalError):
        await db.read_with(lambda connection: connection.execute(sa.text("SELECT nothing FROM nowhere")), small=True)
    assert await db.read_with(read, small=True) == [*range(6), *range(100, 105)]
    assert checkouts.count == 3
    # Closed, the database gives its connections back, and takes them again when used.
    await db.close()
    assert cast(Any, db._sync.pool).checkedout() == 0
    assert await db.write(_insert_noting_thread(table, 6, []), small=True) == 1
    assert (await db.read_with(read, small=True))[:7] == list(range(7))


async def test_sqlite_a_write_cancelled_on_the_writer_thread_holds_the_write_lock_until_the_thread_is_done(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    order: list[str] = []
    started = threading.Event()

    def slow(connection: sa.Connection) -> None:
        started.set()
        time.sleep(0.3)
        insert_into(table).run(connection, {"k": 1})
        order.append("slow write done")

    def small(connection: sa.Connection) -> None:
        order.append("small write")
        insert_into(table).run(connection, {"k": 2})

    write = asyncio.create_task(db.write(slow))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    write.cancel()
    # The writing connection is the thread's until it is done: the small write, which would
    # be made on the event loop on the same connection, comes after.
    await db.write(small, small=True)
    assert order == ["slow write done", "small write"]
    with pytest.raises(asyncio.CancelledError):
        await write
    rows = await db.fetch_all(sa.select(table.c.k).order_by(table.c.k))
    assert [row["k"] for row in rows] == [1, 2]  # a write cancelled once under way may still be made


async def test_sqlite_reading_threads_reuse_their_connections(keys_db: SqliteKeys) -> None:
    db, table = keys_db

    def read(connection: sa.Connection) -> list[int]:
        time.sleep(0.01)  # long enough for the reads gathered below to overlap
        return [row.k for row in connection.execute(sa.select(table.c.k))]

    assert db._sync is not None
    checkouts = _Fired(db._sync.pool, "checkout")
    for k in range(3):
        await db.write(_insert_noting_thread(table, k, []))
        # Four reads at once, on the four reading threads: a connection each at most, taken once.
        assert await asyncio.gather(*(db.read_with(read) for _ in range(4))) == [list(range(k + 1))] * 4
    assert 1 <= checkouts.count <= 4, checkouts.count  # 12 reads
    await db.close()
    assert cast(Any, db._sync.pool).checkedout() == 0


async def test_sqlite_a_write_that_cannot_begin_fails_as_sqlalchemys_error_and_the_next_one_is_made(keys_db: SqliteKeys, tmp_path: Path) -> None:
    db, table = keys_db
    # On the writing connection: wait 0.1 s, not 5, for a lock held elsewhere.
    await db.write(lambda connection: connection.exec_driver_sql("PRAGMA busy_timeout=100"), small=True)
    other = sqlean.connect(tmp_path / "s.db", isolation_level=None)  # the stack's SQLite: one process's locks are its library's
    try:
        other.execute("BEGIN IMMEDIATE")  # SQLite's write lock, taken outside the stack's own
        with pytest.raises(sa.exc.OperationalError, match="database is locked"):
            await db.write(_insert_noting_thread(table, 1, []), small=True)
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert await db.write(_insert_noting_thread(table, 2, []), small=True) == 1
    rows = await db.fetch_all(sa.select(table.c.k))
    assert [row["k"] for row in rows] == [2]


async def test_a_statement_for_several_granted_owners_is_run_by_sqlalchemy_not_compiled_at_each_call(tmp_path: Path) -> None:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    owned = sa.Table("o", sa.MetaData(), sa.Column("k", sa.Integer, primary_key=True), sa.Column("owner", sa.String(16)))
    plain = Prepared(sa.select(owned.c.k).where(owned.c.k >= sa.bindparam("low")).order_by(owned.c.k))
    own = Prepared(cast(Any, plain.statement).where(owned.c.owner == sa.bindparam("caller")))
    caller, grants = auth._current.set(Principal("alice", {})), auth._grants.set({"read": frozenset({"bob"})})
    try:
        await db.create_tables(owned.metadata)
        await db.write(lambda connection: insert_into(owned).run(connection, [{"k": k, "owner": owner} for k, owner in
                                                                             enumerate(["alice", "bob", "carol", "bob"])]))
        statement, params = for_caller(plain, own, owned.c.owner, {"low": 1})
        assert await db.read_with(lambda connection: statement.run(connection, params).rows, small=True) == [(1,), (3,)]
        assert statement._compiled == {}  # its IN list is SQLAlchemy's to expand: compiling it here would be wasted
    finally:
        auth._grants.reset(grants)
        auth._current.reset(caller)
        await db.close()


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Database, asyncpg.Connection]]:
    """A PostgreSQL Database (pool of 4, so up to 2 connections kept) and an admin connection."""
    admin = await _pg_admin()
    db = open_database(PostgresBackend(type="postgres", dsn=PG_DSN, pool_size=4))
    try:
        yield db, admin
    finally:
        await db.close()
        await admin.close()


@pytest.fixture
async def ready_pg(pg: tuple[Database, asyncpg.Connection]) -> AsyncIterator[sa.Table]:
    db, admin = pg
    schema = f"test_storage_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    table = sa.Table("items", sa.MetaData(schema=schema), sa.Column("id", sa.String(64), primary_key=True))
    try:
        await db.create_tables(table.metadata)
        yield table
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _backend_pid(db: Database) -> int:
    return int(await db.read_with(lambda conn: conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()))


async def _terminate(admin: asyncpg.Connection, pid: int) -> None:
    """What a server restart or an idle timeout does to a connection: the server ends it."""
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    while await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the server's goodbye reaches this process's event loop


@pytest.mark.postgres
async def test_postgres_writes_and_reads_reuse_a_kept_connection(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    first = await _backend_pid(db)
    assert await db.write(lambda conn: conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()) == first
    assert await _backend_pid(db) == first
    assert db.kept_connections == 1 and _checked_out(db) == 0


@pytest.mark.postgres
async def test_postgres_kept_connections_are_at_most_half_the_pool(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    pids = await asyncio.gather(*[db.read_with(lambda conn: conn.execute(sa.text("SELECT pg_backend_pid() FROM pg_sleep(0.05)")).scalar_one())
                                  for _ in range(4)])
    assert len(set(pids)) == 4  # four at once: the whole pool
    assert db.kept_connections == 2 and _checked_out(db) == 0
    async with db.read() as conn:  # the pool's other users still get a connection
        assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1


@pytest.mark.postgres
async def test_postgres_a_connection_the_server_closed_is_replaced_not_failed(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, admin = pg
    kept = await _backend_pid(db)
    await _terminate(admin, kept)
    replaced = await _backend_pid(db)  # a read, then a write, on a fresh connection
    assert replaced != kept
    await _terminate(admin, replaced)
    assert await db.write(lambda conn: conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()) not in (kept, replaced)
    async with db.read() as conn:  # the pool's own checkout checks too
        pooled = (await conn.execute(sa.select(sa.func.pg_backend_pid()))).scalar_one()
    await _terminate(admin, pooled)
    async with db.read() as conn:
        assert (await conn.execute(sa.select(sa.func.pg_backend_pid()))).scalar_one() != pooled


@pytest.mark.postgres
async def test_postgres_a_failed_write_gives_its_connection_back_to_the_pool(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    await _backend_pid(db)
    assert db.kept_connections == 1

    def fails(conn: sa.Connection) -> None:
        conn.execute(sa.text("SELECT 1/0"))

    with pytest.raises(sa.exc.DBAPIError, match="division by zero"):
        await db.write(fails)
    assert db.kept_connections == 0 and _checked_out(db) == 0  # rolled back by the pool, not kept in an unknown state
    assert await db.write(lambda conn: conn.execute(sa.text("SELECT 2")).scalar_one()) == 2
    assert db.kept_connections == 1


@pytest.mark.postgres
async def test_postgres_a_write_cancelled_while_it_runs_is_finished_before_the_cancellation_is_raised(
    pg: tuple[Database, asyncpg.Connection], ready_pg: sa.Table
) -> None:
    db, _ = pg
    started = asyncio.Event()

    def slow(conn: sa.Connection) -> None:
        conn.execute(ready_pg.insert().values(id="slow"))
        conn.execute(sa.text("SELECT pg_sleep(0.2)"))

    async def write() -> None:
        started.set()
        await db.write(slow)

    task = asyncio.create_task(write())
    await started.wait()
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Not cut off half-way: committed, and its connection kept in a known state.
    assert await _ids(db, ready_pg) == ["slow"]
    assert db.kept_connections == 1 and _checked_out(db) == 0


async def test_insert_rows_write_what_separate_inserts_would_and_all_or_nothing(database: Database, backend: Backend) -> None:
    # On PostgreSQL they are one statement (jsonb_to_recordset); on SQLite an insert a table.
    metadata = sa.MetaData(schema=backend.schema)
    parents = sa.Table("parents", metadata, sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
                       sa.Column("id", sa.String(16), nullable=False, unique=True), sa.Column("at", sa.Float, nullable=False),
                       sa.Column("live", sa.Boolean, nullable=False, default=False), sa.Column("doc", json_type(), nullable=True),
                       sa.Column("note", sa.String(16), nullable=True))
    children = sa.Table("children", metadata, sa.Column("parent", sa.String(16), primary_key=True),
                        sa.Column("position", sa.Integer, primary_key=True), sa.Column("body", json_type(), nullable=False))
    await database.create_tables(metadata)
    doc = DOC
    at = 1764033352.123456
    parent = {"id": "p1", "at": at, "live": True, "doc": None, "note": None}
    bodies = [{"n": n, "doc": doc} for n in range(3)]
    assert (InsertRows((parents, [parent]), (children, [{"parent": "p1", "position": n, "body": body} for n, body in enumerate(bodies)]))
            .alone_on_postgres()) is not None
    await database.write(InsertRows((parents, [parent]), (children, [{"parent": "p1", "position": n, "body": body} for n, body in enumerate(bodies)])))
    await database.write(lambda connection: connection.execute(parents.insert(), {**parent, "id": "s1"}))  # SQLAlchemy's own insert
    rows = {row["id"]: dict(row) for row in await database.fetch_all(
        sa.select(parents.c.id, parents.c.at, parents.c.live, parents.c.doc, parents.c.note))}
    assert rows["p1"] == {**rows["s1"], "id": "p1"}
    assert {key: rows["p1"][key] for key in ("at", "live", "doc", "note")} == {"at": at, "live": True, "doc": None, "note": None}
    assert [row["body"] for row in await database.fetch_all(sa.select(children.c.body).order_by(children.c.position))] == bodies
    # A row of the second table fails: the first table's row is not left behind.
    with pytest.raises(sa.exc.IntegrityError):
        await database.write(InsertRows((parents, [{**parent, "id": "p2"}]), (children, [{"parent": "p1", "position": 0, "body": {}}])))
    assert sorted(row["id"] for row in await database.fetch_all(sa.select(parents.c.id))) == ["p1", "s1"]
    # A column left to its Python default: as separate inserts, which fill it in.
    assert InsertRows((parents, [{"id": "p3", "at": at}])).alone_on_postgres() is None
    await database.write(InsertRows((parents, [{"id": "p3", "at": at}])))
    assert await database.fetch_all(sa.select(parents.c.live).where(parents.c.id == "p3")) == [{"live": False}]
