"""SQLite's machinery: group commits, writes and small reads on the event loop, held connections, the
lock between processes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
import sqlean  # type: ignore[import-untyped]

from builder.config import SqliteBackend
from runtime.storage import StorageUnavailableError, insert_into, open_database
from support.storage import Fired, SqliteKeys, insert_noting_thread


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


async def test_sqlite_concurrent_writes_share_commits(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    assert db._sync is not None
    commits = Fired(db._sync, "commit")
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


async def test_sqlite_small_writes_are_made_on_the_event_loop_in_groups_and_large_ones_on_the_writer_thread(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    threads: list[str] = []
    assert db._sync is not None
    commits = Fired(db._sync, "commit")
    assert await db.write(insert_noting_thread(table, 0, threads), small=True) == 1
    assert threads == [threading.current_thread().name]
    # Small writes queued in the same turn of the loop go in together, in one commit.
    assert await asyncio.gather(*(db.write(insert_noting_thread(table, k, threads), small=True) for k in range(1, 33))) == [1] * 32
    assert set(threads) == {threading.current_thread().name}
    assert commits.count == 2
    threads.clear()
    assert await db.write(insert_noting_thread(table, 33, threads)) == 1
    assert threads[0].startswith("stack-sqlite-write")
    # A small write queued with a large one goes with it to the writer thread.
    threads.clear()
    await asyncio.gather(db.write(insert_noting_thread(table, 34, threads), small=True), db.write(insert_noting_thread(table, 35, threads)))
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
        write = asyncio.create_task(db.write(insert_noting_thread(table, 1, threads), small=True))
        await asyncio.sleep(0.2)
        # The loop went on (this test runs on it) and the write waits, on the writer thread.
        assert not write.done()
        fcntl.flock(other, fcntl.LOCK_UN)
        assert await asyncio.wait_for(write, 5) == 1
    finally:
        os.close(other)
    assert threads[0].startswith("stack-sqlite-write")
    assert await db.write(insert_noting_thread(table, 2, threads), small=True) == 1
    assert threads[1] == threading.current_thread().name


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
    checkouts = Fired(db._sync.pool, "checkout")
    for k in range(5):
        await db.write(insert_noting_thread(table, k, []), small=True)
        await db.write(insert_noting_thread(table, 100 + k, []))  # on the writer thread, the same connection
        # Each small read ends its transaction: the next one sees the write made since.
        assert (await db.read_with(read, small=True))[-1] == 100 + k
    assert checkouts.count == 1  # the reading one; the writing one was taken by create_tables
    with pytest.raises(sa.exc.IntegrityError):
        await db.write(insert_noting_thread(table, 0, []), small=True)
    # The failed write's connection went back to the pool; the next write takes another, and works.
    assert await db.write(insert_noting_thread(table, 5, []), small=True) == 1
    assert checkouts.count == 2
    with pytest.raises(sa.exc.OperationalError):
        await db.read_with(lambda connection: connection.execute(sa.text("SELECT nothing FROM nowhere")), small=True)
    assert await db.read_with(read, small=True) == [*range(6), *range(100, 105)]
    assert checkouts.count == 3
    # Closed, the database gives its connections back, and takes them again when used.
    await db.close()
    assert cast(Any, db._sync.pool).checkedout() == 0
    assert await db.write(insert_noting_thread(table, 6, []), small=True) == 1
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
    checkouts = Fired(db._sync.pool, "checkout")
    for k in range(3):
        await db.write(insert_noting_thread(table, k, []))
        # Four reads at once, on the four reading threads: a connection each at most, taken once.
        assert await asyncio.gather(*(db.read_with(read) for _ in range(4))) == [list(range(k + 1))] * 4
    assert 1 <= checkouts.count <= 4, checkouts.count  # 12 reads
    await db.close()
    assert cast(Any, db._sync.pool).checkedout() == 0


async def test_sqlite_a_write_that_cannot_begin_is_a_retryable_503_and_the_next_one_is_made(keys_db: SqliteKeys, tmp_path: Path) -> None:
    db, table = keys_db
    # On the writing connection: wait 0.1 s, not 5, for a lock held elsewhere.
    await db.write(lambda connection: connection.exec_driver_sql("PRAGMA busy_timeout=100"), small=True)
    other = sqlean.connect(tmp_path / "s.db", isolation_level=None)  # the stack's SQLite: one process's locks are its library's
    try:
        other.execute("BEGIN IMMEDIATE")  # SQLite's write lock, taken outside the stack's own
        threads: list[str] = []
        with pytest.raises(StorageUnavailableError, match="locked by another process") as refused:
            await db.write(insert_noting_thread(table, 1, threads))  # (not small: on the writer thread, which waits)
        # The lock timeout is the client's to retry: a 503 with Retry-After, SQLAlchemy's error its cause.
        assert (refused.value.status, refused.value.code, refused.value.headers) == (503, "storage_unavailable", {"retry-after": "1"})
        assert isinstance(refused.value.__cause__, sa.exc.OperationalError)
        assert "database is locked" in str(refused.value.__cause__)
        assert threads == []  # refused at its BEGIN: its work never ran
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert await db.write(insert_noting_thread(table, 2, []), small=True) == 1
    rows = await db.fetch_all(sa.select(table.c.k))
    assert [row["k"] for row in rows] == [2]


async def test_sqlite_a_small_write_waits_for_another_programs_lock_on_the_writer_thread_not_the_event_loop(
        keys_db: SqliteKeys, tmp_path: Path) -> None:
    db, table = keys_db
    other = sqlean.connect(tmp_path / "s.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # a backup, the sqlite3 shell: SQLite's write lock, held
        # Released by the event loop itself: were the loop stopped in SQLite's wait for the lock
        # (up to 5 s), this could not run, and the write would fail when the wait ran out.
        asyncio.get_running_loop().call_later(0.3, other.execute, "ROLLBACK")
        threads: list[str] = []
        assert await db.write(insert_noting_thread(table, 1, threads), small=True) == 1
        assert threads == ["stack-sqlite-write_0"]  # made on the writer thread, once the lock was free
        # With the lock free, small writes are made on the loop again.
        assert await db.write(insert_noting_thread(table, 2, threads), small=True) == 1
        assert threads[-1] == "MainThread"
    finally:
        other.close()
    rows = await db.fetch_all(sa.select(table.c.k))
    assert [row["k"] for row in rows] == [1, 2]
