"""Fixtures of the storage layer's tests: a test taking `backend` or `database` runs on SQLite and, where
it is reachable, on PostgreSQL (in a fresh schema)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa

from builder.config import PostgresBackend, SqliteBackend
from runtime.storage import Database, json_type, open_database
from support.storage import PG_DSN, Backend, SqliteKeys, pg_admin


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield Backend(SqliteBackend(type="sqlite", path=tmp_path / "nested" / "stack.db"), None)
        return
    admin = await pg_admin()
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


@pytest.fixture
async def keys_db(tmp_path: Path) -> AsyncIterator[SqliteKeys]:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    table = sa.Table("t", sa.MetaData(), sa.Column("k", sa.Integer, primary_key=True))
    try:
        await db.create_tables(table.metadata)
        yield SqliteKeys(db, table)
    finally:
        await db.close()


@pytest.fixture
async def docs(database: Database, backend: Backend) -> sa.Table:
    table = sa.Table("docs", sa.MetaData(schema=backend.schema), sa.Column("id", sa.String(16), primary_key=True),
                     sa.Column("kind", sa.String(8), nullable=False), sa.Column("n", sa.Integer, nullable=False, default=7),
                     sa.Column("doc", json_type(), nullable=True))
    await database.create_tables(table.metadata)
    return table


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Database, asyncpg.Connection]]:
    """A PostgreSQL Database (pool of 4, so up to 2 connections kept) and an admin connection."""
    admin = await pg_admin()
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
