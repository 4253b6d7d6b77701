"""Fixtures for the stores of the providers and the runtime: each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from builder.config import PostgresBackend, SqliteBackend
from runtime.storage import Database, open_database
from support.postgres import fresh_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteBackend | PostgresBackend]:
    """A fresh SQLite file, or a fresh PostgreSQL database (skipped, saying why, without a server)."""
    if request.param == "sqlite":
        yield SqliteBackend(type="sqlite", path=tmp_path / "stack.db")
        return
    with fresh_database() as dsn:
        yield PostgresBackend(type="postgres", dsn=dsn, pool_size=20)


@pytest.fixture
async def database(backend: SqliteBackend | PostgresBackend) -> AsyncIterator[Database]:
    """The backend opened, and closed after the test."""
    db = open_database(backend)
    yield db
    await db.close()
