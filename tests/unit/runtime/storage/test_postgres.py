"""PostgreSQL's machinery: the pool's connections kept and reused, a use waiting for one, a connection
the server closed, a failed write's connection, a write cancelled while it runs, the schema a DSN
names, and work functions run in a greenlet."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import pytest

from builder.config import PostgresBackend
from runtime.storage import Database, Sql, StorageUnavailableError, Table, open_database
from runtime.storage import postgres
from runtime.storage.outage import PoolBusy
from runtime.storage.postgres import PgPool, await_
from support.storage import PG_DSN, Counted, HeldOpen, backend_pid, ids_of, pid_of, terminate

SLOW_PID = Sql("SELECT pg_backend_pid() FROM pg_sleep(0.05)")


def pool(db: Database) -> PgPool:
    assert db._pg is not None
    return db._pg


@pytest.mark.postgres
async def test_postgres_writes_and_reads_reuse_a_kept_connection(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    first = await backend_pid(db)
    assert await db.write(pid_of) == first
    assert await db.write(pid_of, one_statement=True) == first
    assert await backend_pid(db) == first
    assert len(pool(db).idle) == 1 and db.connections_in_use == 0


@pytest.mark.postgres
async def test_postgres_keeps_every_connection_of_the_pool_and_opens_no_more(
        pg: tuple[Database, asyncpg.Connection], monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = pg
    opened = Counted(monkeypatch, postgres, "connect")
    pids = await asyncio.gather(*[db.read_with(lambda connection: SLOW_PID.run(connection).scalar()) for _ in range(4)])
    assert len(set(pids)) == 4  # four at once: the whole pool
    assert len(pool(db).idle) == 4 and db.connections_in_use == 0  # all kept
    # Eight at once: four run, four wait for them, on the same connections.
    again = await asyncio.gather(*[db.read_with(lambda connection: SLOW_PID.run(connection).scalar()) for _ in range(8)])
    assert set(again) == set(pids)
    assert opened.count == 4
    assert len(pool(db).idle) == 4 and db.connections_in_use == 0


@pytest.mark.postgres
async def test_postgres_a_use_waits_for_a_connection_to_come_free_and_past_the_pools_timeout_is_a_503(
        pg: tuple[Database, asyncpg.Connection], monkeypatch: pytest.MonkeyPatch) -> None:
    db = open_database(PostgresBackend(type="postgres", dsn=PG_DSN, pool_size=1))
    try:
        holding = HeldOpen()  # the pool's one connection, busy until released
        held = asyncio.create_task(db.write(holding))
        await holding.entered()
        assert db.connections_in_use == 1
        waiting = asyncio.create_task(db.read_one(Sql("SELECT 1")))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        holding.release()
        assert await held == 1
        assert await asyncio.wait_for(waiting, 5) == (1,)

        monkeypatch.setattr(postgres, "POOL_TIMEOUT_S", 0.2)
        holding = HeldOpen()
        held = asyncio.create_task(db.write(holding))
        await holding.entered()
        try:
            with pytest.raises(StorageUnavailableError, match="every connection to the database stayed busy") as busy:
                await db.read_one(Sql("SELECT 1"))
            assert isinstance(busy.value.__cause__, PoolBusy)
            assert busy.value.status == 503
        finally:
            holding.release()
        assert await held == 1
        assert await db.read_one(Sql("SELECT 1")) == (1,)  # and once free, served again
        assert db.connections_in_use == 0 and len(pool(db).idle) == 1
    finally:
        await db.close()


@pytest.mark.postgres
async def test_postgres_a_connection_the_server_closed_is_replaced_not_failed(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, admin = pg
    kept = await backend_pid(db)
    await terminate(admin, kept)
    replaced = await backend_pid(db)  # a read, then a write, on a fresh connection
    assert replaced != kept
    await terminate(admin, replaced)
    written = await db.write(pid_of)
    assert written not in (kept, replaced)
    # A server restart: every kept connection closed at once.
    pids = await asyncio.gather(*[db.read_with(lambda connection: SLOW_PID.run(connection).scalar()) for _ in range(3)])
    for pid in set(pids):
        await terminate(admin, pid)
    after = await asyncio.gather(*[db.read_with(lambda connection: SLOW_PID.run(connection).scalar()) for _ in range(3)])
    assert not set(after) & set(pids)
    assert db.connections_in_use == 0


@pytest.mark.postgres
async def test_postgres_a_failed_write_rolls_back_and_its_connection_is_kept_for_the_next(
        pg: tuple[Database, asyncpg.Connection], ready_pg: Table) -> None:
    db, _ = pg
    kept = await backend_pid(db)

    def fails(connection: Any) -> None:
        Sql("INSERT INTO items (id) VALUES ('a')").run(connection)
        Sql("SELECT 1/0").run(connection)

    with pytest.raises(asyncpg.DivisionByZeroError, match="division by zero"):  # the driver's own error
        await db.write(fails)
    assert db.connections_in_use == 0 and len(pool(db).idle) == 1
    assert not pool(db).idle[0].driver.is_in_transaction()  # rolled back: in a known state
    assert await ids_of(db, ready_pg) == []
    with pytest.raises(asyncpg.DivisionByZeroError):  # in autocommit, too
        await db.write(lambda connection: Sql("SELECT 1/0").run(connection), one_statement=True)
    assert await db.write(lambda connection: Sql("SELECT 2").run(connection).scalar()) == 2
    assert await backend_pid(db) == kept


@pytest.mark.postgres
async def test_postgres_a_write_cancelled_while_it_runs_is_finished_before_the_cancellation_is_raised(
        pg: tuple[Database, asyncpg.Connection], ready_pg: Table) -> None:
    db, _ = pg
    started = asyncio.Event()

    def slow(connection: Any) -> None:
        Sql("INSERT INTO items (id) VALUES ('slow')").run(connection)
        started.set()
        Sql("SELECT pg_sleep(0.2)").run(connection)

    task = asyncio.create_task(db.write(slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Not cut off half-way: committed, and its connection kept in a known state.
    assert not pool(db).idle[0].driver.is_in_transaction()
    assert await ids_of(db, ready_pg) == ["slow"]
    assert len(pool(db).idle) == 1 and db.connections_in_use == 0


@pytest.mark.postgres
async def test_postgres_the_dsns_search_path_is_where_the_declared_tables_are_made(
        pg: tuple[Database, asyncpg.Connection], ready_pg: Table) -> None:
    db, admin = pg
    schema = dict(part.split("=") for part in urlsplit(pool(db).dsn).query.split("&"))["search_path"]
    assert await db.read_one(Sql("SELECT current_schema()")) == (schema,)
    assert await admin.fetch("SELECT table_schema FROM information_schema.tables WHERE table_name = 'items'") == [(schema,)]


@pytest.mark.postgres
async def test_postgres_a_work_function_may_wait_on_the_event_loop(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    heard: list[str] = []

    def work(connection: Any) -> int:
        await_(asyncio.sleep(0.01))  # the loop runs on meanwhile
        heard.append("slept")
        return int(Sql("SELECT :n + 1").run(connection, {"n": 1}).scalar())

    assert list(await asyncio.gather(db.read_with(work), db.write(work))) == [2, 2]
    assert heard == ["slept", "slept"]


async def test_await_outside_a_work_function_is_refused() -> None:
    waiting = asyncio.get_running_loop().create_future()
    with pytest.raises(RuntimeError, match="outside Database.write or Database.read_with"):
        await_(waiting)


@pytest.mark.postgres
async def test_postgres_a_read_in_one_transaction_keeps_a_local_setting_for_the_statements_after_it(
        pg: tuple[Database, asyncpg.Connection]) -> None:
    # What the vector stores' nearest-neighbour search needs (SET LOCAL hnsw.ef_search): in
    # autocommit, a local setting ends with its own statement.
    db, _ = pg

    def read(connection: Any) -> str:
        Sql("SET LOCAL statement_timeout = '1234ms'").run(connection)
        return str(Sql("SHOW statement_timeout").run(connection).scalar())

    assert await db.read_with(read, transaction=True) == "1234ms"
    assert await db.read_with(read) != "1234ms"
    assert await db.read_with(lambda connection: str(Sql("SHOW statement_timeout").run(connection).scalar())) != "1234ms"


@pytest.mark.postgres
async def test_postgres_a_work_function_sees_its_callers_context_variables(pg: tuple[Database, asyncpg.Connection]) -> None:
    # As on the event loop: a greenlet starts with no context of its own unless it is given its caller's.
    db, _ = pg
    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="none")
    seen.set("the caller's")
    assert await db.read_with(lambda connection: seen.get()) == "the caller's"
    assert await db.write(lambda connection: seen.get()) == "the caller's"
