"""PostgreSQL's machinery: kept connections, a connection the server closed, a write cancelled while it runs."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
import sqlalchemy as sa

from runtime.storage import Database
from support.storage import backend_pid, checked_out, ids_of, terminate


@pytest.mark.postgres
async def test_postgres_writes_and_reads_reuse_a_kept_connection(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    first = await backend_pid(db)
    assert await db.write(lambda conn: conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()) == first
    assert await backend_pid(db) == first
    assert db.kept_connections == 1 and checked_out(db) == 0


@pytest.mark.postgres
async def test_postgres_kept_connections_are_at_most_half_the_pool(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    pids = await asyncio.gather(*[db.read_with(lambda conn: conn.execute(sa.text("SELECT pg_backend_pid() FROM pg_sleep(0.05)")).scalar_one())
                                  for _ in range(4)])
    assert len(set(pids)) == 4  # four at once: the whole pool
    assert db.kept_connections == 2 and checked_out(db) == 0
    async with db.read() as conn:  # the pool's other users still get a connection
        assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1


@pytest.mark.postgres
async def test_postgres_a_connection_the_server_closed_is_replaced_not_failed(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, admin = pg
    kept = await backend_pid(db)
    await terminate(admin, kept)
    replaced = await backend_pid(db)  # a read, then a write, on a fresh connection
    assert replaced != kept
    await terminate(admin, replaced)
    assert await db.write(lambda conn: conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()) not in (kept, replaced)
    async with db.read() as conn:  # the pool's own checkout checks too
        pooled = (await conn.execute(sa.select(sa.func.pg_backend_pid()))).scalar_one()
    await terminate(admin, pooled)
    async with db.read() as conn:
        assert (await conn.execute(sa.select(sa.func.pg_backend_pid()))).scalar_one() != pooled


@pytest.mark.postgres
async def test_postgres_a_failed_write_gives_its_connection_back_to_the_pool(pg: tuple[Database, asyncpg.Connection]) -> None:
    db, _ = pg
    await backend_pid(db)
    assert db.kept_connections == 1

    def fails(conn: sa.Connection) -> None:
        conn.execute(sa.text("SELECT 1/0"))

    with pytest.raises(sa.exc.DBAPIError, match="division by zero"):
        await db.write(fails)
    assert db.kept_connections == 0 and checked_out(db) == 0  # rolled back by the pool, not kept in an unknown state
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
    assert await ids_of(db, ready_pg) == ["slow"]
    assert db.kept_connections == 1 and checked_out(db) == 0
