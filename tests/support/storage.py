"""What the storage layer's tests share: the PostgreSQL they reach, the backends and helpers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlean  # type: ignore[import-untyped]

from builder.config import PostgresBackend, SqliteBackend
from runtime.storage import Database, Sql, Table, dialect_of, driver
from runtime.storage.postgres import await_


PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


async def pg_admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncio.TimeoutError) as error:
        pytest.skip(f"PostgreSQL not reachable at 127.0.0.1:5432: {error}")


@contextlib.asynccontextmanager
async def pg_schema(admin: asyncpg.Connection) -> AsyncIterator[str]:
    """A DSN whose connections find the tables in a fresh schema of their own (dropped after): asyncpg
    passes the DSN's `search_path` on to the server as a setting of each connection."""
    schema = f"test_storage_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_DSN}?search_path={schema}"
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class SqliteKeys(NamedTuple):
    db: Database
    table: Table  # "t": an integer primary key "k", created


async def ids_of(database: Database, items: Table) -> list[str]:
    return [item_id for item_id, in await database.read_all(Sql(f"SELECT id FROM {items.name} ORDER BY id"))]


async def keys_of(database: Database, keys: Table) -> list[int]:
    return [k for k, in await database.read_all(Sql(f"SELECT k FROM {keys.name} ORDER BY k"))]


DOC = {"text": "é \"q\" 🙂", "list": [1, 2.5, None, True], "nested": {"a": {}}}  # JSON that escapes and nests


async def backend_pid(db: Database) -> int:
    row = await db.read_one(Sql("SELECT pg_backend_pid()"))
    assert row is not None
    return int(row[0])


def pid_of(connection: Any) -> int:
    """The PostgreSQL backend of a work function's connection."""
    return int(Sql("SELECT pg_backend_pid()").run(connection).scalar())


async def terminate(admin: asyncpg.Connection, pid: int) -> None:
    """What a server restart or an idle timeout does to a connection: the server ends it."""
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    while await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the server's goodbye reaches this process's event loop


def insert_noting_thread(table: Table, k: int, threads: list[str]) -> Callable[[Any], int]:
    def work(connection: Any) -> int:
        threads.append(threading.current_thread().name)
        return Sql(f"INSERT INTO {table.name} (k) VALUES (:k)").run(connection, {"k": k}).rowcount
    return work


class Counted:
    """The calls made to `owner.name` (a function of a module, or a method of a class) since this was
    made, by `monkeypatch`: the thread each was made on and what it returned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        self.threads: list[str] = []
        self.returned: list[Any] = []
        original = getattr(owner, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.threads.append(threading.current_thread().name)
            result = original(*args, **kwargs)
            self.returned.append(result)
            return result

        monkeypatch.setattr(owner, name, counting)

    @property
    def count(self) -> int:
        return len(self.threads)


class HeldOpen:
    """A write whose transaction is held open: its work runs `statements`, then waits until `release()`
    (on SQLite on the writer thread, so give it to a write that is not `small`; on PostgreSQL in its
    greenlet, the event loop running on). It then returns 1, or raises what `release` was given."""

    def __init__(self, *statements: tuple[Sql, Mapping[str, Any]]) -> None:
        self.statements = statements
        self.inside = threading.Event()
        self._released_thread = threading.Event()
        self._released_loop = asyncio.Event()
        self._raise: BaseException | None = None

    def __call__(self, connection: Any) -> int:
        for statement, params in self.statements:
            statement.run(connection, params)
        self.inside.set()
        if dialect_of(connection) == "sqlite":
            released = self._released_thread.wait(10)
        else:
            released = await_(_within(self._released_loop.wait(), 10))
        assert released, "a transaction held open was never released"
        if self._raise is not None:
            raise self._raise
        return 1

    async def entered(self) -> None:
        """Once its statements are made (its locks taken)."""
        async with asyncio.timeout(10):
            while not self.inside.is_set():
                await asyncio.sleep(0.005)

    def release(self, raising: BaseException | None = None) -> None:
        self._raise = raising
        self._released_thread.set()
        self._released_loop.set()


async def _within(waiting: Any, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            await waiting
    except TimeoutError:
        return False
    return True


@contextlib.contextmanager
def loop_errors() -> Iterator[list[dict[str, Any]]]:
    """What the running event loop's exception handler is given while inside (a task's exception that
    nobody retrieved, say: asyncio logs it as an error when the task is freed, collected on leaving)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
        gc.collect()
    finally:
        loop.set_exception_handler(previous)


@contextlib.contextmanager
def statement_threads(backend: SqliteBackend | PostgresBackend) -> Iterator[list[tuple[str, str]]]:
    """The (thread name, table) of each SELECT run on `backend`'s database while inside: where a
    store's reads are made (the event loop's thread, or a reading thread). Other databases'
    statements are not noted: a stack another test keeps running meanwhile (the integration suite's,
    kept for the session) polls its own tables from its own threads."""
    wanted = str(backend.path.resolve()) if isinstance(backend, SqliteBackend) else urlsplit(backend.dsn).path.lstrip("/")
    seen: list[tuple[str, str]] = []
    run_on_driver = driver.execute

    def noted(connection: Any, statement: Any, params: Any) -> Any:
        if isinstance(connection, sqlean.Connection):
            database = str(Path(connection.execute("PRAGMA database_list").fetchone()[2]).resolve())
        else:
            database = connection.driver._params.database
        if database == wanted and statement.text.lstrip().upper().startswith("SELECT"):
            table = re.search(r"\bFROM\s+(\w+)", statement.text)
            seen.append((threading.current_thread().name, table.group(1) if table else ""))
        return run_on_driver(connection, statement, params)

    driver.execute = noted
    try:
        yield seen
    finally:
        driver.execute = run_on_driver
