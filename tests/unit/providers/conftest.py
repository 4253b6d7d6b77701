"""Fixtures for the providers' stores: each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.config import PostgresBackend, SqliteBackend
from support.postgres import fresh_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteBackend | PostgresBackend]:
    """A fresh SQLite file, or a fresh PostgreSQL database (skipped, saying why, without a server)."""
    if request.param == "sqlite":
        yield SqliteBackend(type="sqlite", path=tmp_path / "stack.db")
        return
    with fresh_database() as dsn:
        yield PostgresBackend(type="postgres", dsn=dsn, pool_size=20)
