"""SQLite's machinery: group commits, writes and small reads on the event loop, held connections, the
lock between processes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlean  # type: ignore[import-untyped]

from builder.config import SqliteBackend
from runtime.storage import INTEGER, Column, IntegrityError, Sql, StorageUnavailableError, open_database, table
from runtime.storage import sqlite
from runtime.storage.sqlite import Held
from support.storage import Counted, HeldOpen, SqliteKeys, insert_noting_thread, keys_of, loop_errors

INSERT_K = Sql("INSERT INTO t (k) VALUES (:k)")
KEYS = Sql("SELECT k FROM t ORDER BY k")


def read_keys(connection: Any) -> list[int]:
    return [k for k, in KEYS.run(connection).rows]


def closed(connection: Any) -> bool:
    try:
        connection.execute("SELECT 1")
    except sqlean.ProgrammingError:
        return True
    return False


async def test_sqlite_read_then_write_transactions_serialize(tmp_path: Path) -> None:
    # Deferred transactions that read and then write would fail with "database is locked" on lock
    # upgrade and lose updates; write transactions here are serialized and IMMEDIATE.
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    counter = table("counter", Column("n", INTEGER, nullable=False))
    try:
        await db.create_tables([counter])
        await db.write_one(Sql("INSERT INTO counter (n) VALUES (0)"))

        def increment_once(connection: Any) -> None:
            n = Sql("SELECT n FROM counter").run(connection).scalar()
            Sql("UPDATE counter SET n = :n").run(connection, {"n": n + 1})

        async def increment() -> None:
            for k in range(4):
                await db.write(increment_once, small=k % 2 == 0)

        await asyncio.wait_for(asyncio.gather(*(increment() for _ in range(32))), 30)
        assert await db.read_one(Sql("SELECT n FROM counter")) == (128,)
    finally:
        await db.close()


async def test_sqlite_every_connection_is_set_up_alike(tmp_path: Path) -> None:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "a" / "b" / "s.db"))

    def settings(connection: Any) -> list[Any]:
        pragmas = [connection.execute(f"PRAGMA {name}").fetchone()[0]
                   for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys", "wal_autocheckpoint")]
        return [*pragmas, connection.execute("SELECT vec_version()").fetchone()[0].startswith("v")]  # sqlite-vec loaded

    expected = ["wal", 1, 5000, 1, 16384, True]
    try:
        assert db.dialect == "sqlite"
        assert await db.write(settings) == expected  # the writer thread's
        assert await db.write(settings, small=True) == expected  # the same connection, on the event loop
        assert await db.read_with(settings, small=True) == expected  # the event loop's reads
        assert await db.read_with(settings) == expected  # a reading thread's
        assert (tmp_path / "a" / "b" / "s.db").exists()
    finally:
        await db.close()


async def test_sqlite_concurrent_writes_share_commits(keys_db: SqliteKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    db, table = keys_db
    transactions = Counted(monkeypatch, Held, "write")  # a transaction each, committed once
    await asyncio.gather(*(db.write_one(INSERT_K, {"k": k}) for k in range(64)))
    assert await keys_of(db, table) == list(range(64))
    # The first write runs alone; the rest queue behind it and go in as few groups.
    assert transactions.count <= 4, transactions.count


async def test_sqlite_a_write_cancelled_while_queued_is_not_made(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    holding = HeldOpen()  # holds the write lock: the writes below queue
    held = asyncio.create_task(db.write(holding))
    await holding.entered()
    queued = [asyncio.create_task(db.write_one(INSERT_K, {"k": k})) for k in range(3)]
    await asyncio.sleep(0.05)
    queued[1].cancel()
    holding.release()
    assert await held == 1
    assert [await queued[0], await queued[2]] == [1, 1]
    assert queued[1].cancelled()
    assert await keys_of(db, table) == [0, 2]


async def test_sqlite_writes_held_by_a_stopped_committer_fail_rather_than_hang(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    first_in, first_go, group_in, group_go = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def waiting_insert(k: int, inside: threading.Event, go: threading.Event) -> Any:
        def work(connection: Any) -> int:
            inside.set()
            assert go.wait(10)
            return INSERT_K.run(connection, {"k": k}).rowcount
        return work

    loop = asyncio.get_running_loop()
    first = asyncio.create_task(db.write(waiting_insert(1, first_in, first_go)))  # runs at once, alone
    assert await loop.run_in_executor(None, first_in.wait, 5)
    grouped = [asyncio.create_task(db.write(waiting_insert(k, group_in, group_go))) for k in (2, 3)]  # queue behind it
    await asyncio.sleep(0.05)
    first_go.set()
    assert await first == 1
    assert await loop.run_in_executor(None, group_in.wait, 5)  # the committer has taken them and is running the group
    assert db._committer is not None
    db._committer.cancel()  # as at a shutdown
    group_go.set()
    for task in grouped:
        with pytest.raises(RuntimeError, match="stopped"):
            await asyncio.wait_for(task, 5)
    # (Whether the group was committed is not known to its writers.) The next write is made.
    assert await asyncio.wait_for(db.write_one(INSERT_K, {"k": 4}), 5) == 1
    assert (await keys_of(db, table))[-1] == 4


async def test_sqlite_small_writes_are_made_on_the_event_loop_in_groups_and_large_ones_on_the_writer_thread(
        keys_db: SqliteKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    db, table = keys_db
    threads: list[str] = []
    transactions = Counted(monkeypatch, Held, "write")
    assert await db.write(insert_noting_thread(table, 0, threads), small=True) == 1
    assert threads == [threading.current_thread().name]
    # Small writes queued in the same turn of the loop go in together, in one commit.
    assert await asyncio.gather(*(db.write(insert_noting_thread(table, k, threads), small=True) for k in range(1, 33))) == [1] * 32
    assert set(threads) == {threading.current_thread().name}
    assert transactions.count == 2
    assert set(transactions.threads) == {threading.current_thread().name}
    threads.clear()
    assert await db.write(insert_noting_thread(table, 33, threads)) == 1
    assert threads[0].startswith("stack-sqlite-write")
    # A small write queued with a large one goes with it to the writer thread.
    threads.clear()
    await asyncio.gather(db.write(insert_noting_thread(table, 34, threads), small=True), db.write(insert_noting_thread(table, 35, threads)))
    assert len(threads) == 2 and all(name.startswith("stack-sqlite-write") for name in threads), threads
    assert await keys_of(db, table) == list(range(36))


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


async def test_sqlite_a_write_holds_the_lock_between_processes_until_it_commits(keys_db: SqliteKeys, tmp_path: Path) -> None:
    db, _ = keys_db
    holding = HeldOpen((INSERT_K, {"k": 1}))
    held = asyncio.create_task(db.write(holding))
    other = os.open(tmp_path / "s.db.write-lock", os.O_RDWR)  # another process's view of the lock
    try:
        await holding.entered()
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holding.release()
        assert await held == 1
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once committed
        fcntl.flock(other, fcntl.LOCK_UN)
    finally:
        os.close(other)


async def test_sqlite_small_reads_are_made_on_the_event_loop_and_others_on_a_reading_thread(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    threads: list[str] = []

    def read(connection: Any) -> list[int]:
        threads.append(threading.current_thread().name)
        return read_keys(connection)

    await db.write(lambda connection: INSERT_K.run(connection, [{"k": 1}, {"k": 2}]), small=True)
    holding = HeldOpen((INSERT_K, {"k": 3}))
    held = asyncio.create_task(db.write(holding))
    try:
        await holding.entered()  # a write under way: a reader in WAL mode does not wait for it
        assert await db.read_with(read, small=True) == [1, 2]
    finally:
        holding.release()
    await held
    assert await db.read_with(read) == [1, 2, 3]
    assert threads[0] == threading.current_thread().name and threads[1].startswith("stack-sqlite-read")


async def test_sqlite_writes_and_small_reads_keep_one_connection_each_and_a_failure_rolls_back_on_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = Counted(monkeypatch, sqlite, "connect")
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    keys = table("t", Column("k", INTEGER, primary_key=True))
    try:
        await db.create_tables([keys])
        assert opened.count == 1  # the writing one
        for k in range(5):
            await db.write(insert_noting_thread(keys, k, []), small=True)
            await db.write(insert_noting_thread(keys, 100 + k, []))  # on the writer thread, the same connection
            # Each small read ends its transaction: the next one sees the write made since.
            assert (await db.read_with(read_keys, small=True))[-1] == 100 + k
        assert opened.count == 2  # and the reading one
        with pytest.raises(IntegrityError):
            await db.write(insert_noting_thread(keys, 0, []), small=True)
        # The failed write was rolled back on its connection, which the next write uses, and works.
        assert await db.write(insert_noting_thread(keys, 5, []), small=True) == 1
        with pytest.raises(sqlean.OperationalError, match="no such table"):
            await db.read_with(lambda connection: connection.execute("SELECT x FROM nowhere"), small=True)
        assert await db.read_with(read_keys, small=True) == [*range(6), *range(100, 105)]
        assert opened.count == 2
        # Closed, the database closes its connections, and opens them again when used.
        await db.close()
        assert all(closed(connection) for connection in opened.returned)
        assert await db.write(insert_noting_thread(keys, 6, []), small=True) == 1
        assert (await db.read_with(read_keys, small=True))[:7] == list(range(7))
        assert opened.count == 4
    finally:
        await db.close()


async def test_sqlite_a_connection_left_in_a_state_not_known_is_closed_and_another_opened(
        keys_db: SqliteKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    db, table = keys_db
    opened = Counted(monkeypatch, sqlite, "connect")

    def breaks(connection: Any) -> None:
        INSERT_K.run(connection, {"k": 1})
        connection.close()  # neither its COMMIT nor a ROLLBACK can be made

    with pytest.raises(sqlean.ProgrammingError):
        await db.write(breaks)
    assert opened.count == 0
    assert await db.write_one(INSERT_K, {"k": 2}) == 1
    assert opened.count == 1
    assert await keys_of(db, table) == [2]


async def test_sqlite_a_write_cancelled_on_the_writer_thread_holds_the_write_lock_until_the_thread_is_done(keys_db: SqliteKeys) -> None:
    db, table = keys_db
    order: list[str] = []
    started = threading.Event()

    def slow(connection: Any) -> None:
        started.set()
        time.sleep(0.3)
        INSERT_K.run(connection, {"k": 1})
        order.append("slow write done")

    def small(connection: Any) -> None:
        order.append("small write")
        INSERT_K.run(connection, {"k": 2})

    write = asyncio.create_task(db.write(slow))
    assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    write.cancel()
    # The writing connection is the thread's until it is done: the small write, which would
    # be made on the event loop on the same connection, comes after.
    await db.write(small, small=True)
    assert order == ["slow write done", "small write"]
    with pytest.raises(asyncio.CancelledError):
        await write
    assert await keys_of(db, table) == [1, 2]  # a write cancelled once under way may still be made


async def test_sqlite_a_write_cancelled_on_the_writer_thread_that_then_fails_raises_the_cancellation_and_logs_nothing(
        keys_db: SqliteKeys) -> None:
    db, table = keys_db
    started, go = threading.Event(), threading.Event()

    def fails(connection: Any) -> None:
        started.set()
        assert go.wait(10)
        INSERT_K.run(connection, {"k": 1})
        raise RuntimeError("the write failed")

    with loop_errors() as errors:
        write = asyncio.create_task(db.write(fails))
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        write.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(write), 5)
        del write  # (its cancellation's traceback holds the write's own outcome)
    assert errors == []
    assert await keys_of(db, table) == []  # rolled back


async def test_sqlite_reading_threads_reuse_their_connections(keys_db: SqliteKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = keys_db
    opened = Counted(monkeypatch, sqlite, "connect")

    def read(connection: Any) -> list[int]:
        time.sleep(0.01)  # long enough for the reads gathered below to overlap
        return read_keys(connection)

    for k in range(3):
        await db.write(insert_noting_thread(keys_db.table, k, []))
        # Four reads at once, on the four reading threads: a connection each at most, opened once.
        assert await asyncio.gather(*(db.read_with(read) for _ in range(4))) == [list(range(k + 1))] * 4
    assert 1 <= opened.count <= 4, opened.count  # 12 reads
    assert all(name.startswith("stack-sqlite-read") for name in opened.threads), opened.threads
    await db.close()
    assert all(closed(connection) for connection in opened.returned)


async def test_sqlite_a_write_that_cannot_begin_is_a_retryable_503_and_the_next_one_is_made(keys_db: SqliteKeys, tmp_path: Path) -> None:
    db, table = keys_db
    # On the writing connection: wait 0.1 s, not 5, for a lock held elsewhere.
    await db.write(lambda connection: connection.execute("PRAGMA busy_timeout=100"), small=True)
    other = sqlean.connect(tmp_path / "s.db", isolation_level=None)  # the stack's SQLite: one process's locks are its library's
    try:
        other.execute("BEGIN IMMEDIATE")  # SQLite's write lock, taken outside the stack's own
        threads: list[str] = []
        with pytest.raises(StorageUnavailableError, match="locked by another process") as refused:
            await db.write(insert_noting_thread(table, 1, threads))  # (not small: on the writer thread, which waits)
        # The lock timeout is the client's to retry: a 503 with Retry-After, the driver's error its cause.
        assert (refused.value.status, refused.value.code, refused.value.headers) == (503, "storage_unavailable", {"retry-after": "1"})
        assert isinstance(refused.value.__cause__, sqlean.OperationalError)
        assert "database is locked" in str(refused.value.__cause__)
        assert threads == []  # refused at its BEGIN: its work never ran
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert await db.write(insert_noting_thread(table, 2, []), small=True) == 1
    assert await keys_of(db, table) == [2]


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
    assert await keys_of(db, table) == [1, 2]
