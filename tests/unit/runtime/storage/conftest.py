"""Fixtures of the storage layer's tests: a test taking `backend` or `database` runs on SQLite and, where
it is reachable, on PostgreSQL (in a fresh schema, which its connections find by the DSN's
`search_path`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from builder.config import PostgresBackend, SqliteBackend
from runtime.storage import INTEGER, JSON, Column, Database, String, Table, open_database, table
from support.storage import SqliteKeys, pg_admin, pg_schema

ITEMS = table(
    "items",
    Column("id", String(64), primary_key=True),
    Column("n", INTEGER, nullable=False, default=0),
    Column("payload", JSON),
)
DOCS = table(
    "docs",
    Column("id", String(16), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("n", INTEGER, nullable=False, default=7),
    Column("doc", JSON),
)
KEYS = table("t", Column("k", INTEGER, primary_key=True))
PG_ITEMS = table("items", Column("id", String(64), primary_key=True))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteBackend | PostgresBackend]:
    if request.param == "sqlite":
        yield SqliteBackend(type="sqlite", path=tmp_path / "nested" / "stack.db")
        return
    admin = await pg_admin()
    try:
        async with pg_schema(admin) as dsn:
            yield PostgresBackend(type="postgres", dsn=dsn, pool_size=10)
    finally:
        await admin.close()


@pytest.fixture
async def database(backend: SqliteBackend | PostgresBackend) -> AsyncIterator[Database]:
    db = open_database(backend)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def items() -> Table:
    """`items` as declared, not yet made."""
    return ITEMS


@pytest.fixture
async def ready(database: Database) -> Table:
    """`items`, made."""
    await database.create_tables([ITEMS])
    return ITEMS


@pytest.fixture
async def docs(database: Database) -> Table:
    await database.create_tables([DOCS])
    return DOCS


@pytest.fixture
async def keys_db(tmp_path: Path) -> AsyncIterator[SqliteKeys]:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    try:
        await db.create_tables([KEYS])
        yield SqliteKeys(db, KEYS)
    finally:
        await db.close()


@pytest.fixture
async def pg() -> AsyncIterator[tuple[Database, asyncpg.Connection]]:
    """A PostgreSQL Database (a pool of 4) in a fresh schema, and an admin connection."""
    admin = await pg_admin()
    try:
        async with pg_schema(admin) as dsn:
            db = open_database(PostgresBackend(type="postgres", dsn=dsn, pool_size=4))
            try:
                yield db, admin
            finally:
                await db.close()
    finally:
        await admin.close()


@pytest.fixture
async def ready_pg(pg: tuple[Database, asyncpg.Connection]) -> Table:
    """`items` (an id only), made in `pg`'s schema."""
    db, _ = pg
    await db.create_tables([PG_ITEMS])
    return PG_ITEMS
