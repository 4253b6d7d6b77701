"""What the storage layer's tests share: the PostgreSQL they reach, the backends and helpers."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
import pytest
import sqlalchemy as sa

from builder.config import PostgresBackend, SqliteBackend
from runtime.storage import Database, driver


PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


class Backend(NamedTuple):
    config: SqliteBackend | PostgresBackend
    schema: str | None  # the fresh PostgreSQL schema this test's tables live in


async def pg_admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncio.TimeoutError) as error:
        pytest.skip(f"PostgreSQL not reachable at 127.0.0.1:5432: {error}")


def checked_out(database: Database) -> int:
    """Connections in use: out of the pool, and not kept idle for the next use."""
    pool: Any = database.engine.pool
    return int(pool.checkedout()) - database.kept_connections


class SqliteKeys(NamedTuple):
    db: Database
    table: sa.Table  # "t": an integer primary key "k", created


class Fired:
    """How many times an SQLAlchemy event of `target` (an engine, a pool) fired since this was made."""

    def __init__(self, target: Any, event: str) -> None:
        self.count = 0
        sa.event.listen(target, event, self._fired)

    def _fired(self, *_args: Any) -> None:
        self.count += 1


async def ids_of(database: Database, items: sa.Table) -> list[str]:
    rows = await database.fetch_all(sa.select(items.c.id).order_by(items.c.id))
    return [row["id"] for row in rows]


DOC = {"text": "é \"q\" 🙂", "list": [1, 2.5, None, True], "nested": {"a": {}}}  # JSON that escapes and nests


async def backend_pid(db: Database) -> int:
    return int(await db.read_with(lambda conn: conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()))


async def terminate(admin: asyncpg.Connection, pid: int) -> None:
    """What a server restart or an idle timeout does to a connection: the server ends it."""
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    while await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the server's goodbye reaches this process's event loop


def insert_noting_thread(table: sa.Table, k: int, threads: list[str]) -> Any:
    def work(conn: sa.Connection) -> int:
        threads.append(threading.current_thread().name)
        return conn.execute(table.insert().values(k=k)).rowcount
    return work


@contextlib.contextmanager
def statement_threads(backend: SqliteBackend | PostgresBackend) -> Iterator[list[tuple[str, str]]]:
    """The (thread name, table) of each SELECT run (by SQLAlchemy or on the driver) on `backend`'s database while
    inside: where a store's reads are made (the event loop's thread, or a reading thread). Other
    databases' statements are not noted: a stack another test keeps running meanwhile (the integration
    suite's, kept for the session) polls its own tables from its own threads."""
    database = str(backend.path.resolve()) if isinstance(backend, SqliteBackend) else sa.make_url(backend.dsn).database
    seen: list[tuple[str, str]] = []

    def noted(conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        url = conn.engine.url
        if (str(Path(url.database).resolve()) if url.get_backend_name() == "sqlite" else url.database) != database:
            return
        if statement.lstrip().upper().startswith("SELECT"):
            table = re.search(r"\bFROM\s+(\w+)", statement)
            seen.append((threading.current_thread().name, table.group(1) if table else ""))

    run_on_driver = driver.execute

    def noted_on_driver(conn: Any, statement: Any, params: Any) -> Any:
        noted(conn, None, statement.text)
        return run_on_driver(conn, statement, params)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", noted)
    driver.execute = noted_on_driver  # the `Sql` statements, run on the driver beneath SQLAlchemy
    try:
        yield seen
    finally:
        driver.execute = run_on_driver
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", noted)
