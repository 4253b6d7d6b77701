"""A fresh PostgreSQL database for a test, on the server at 127.0.0.1:5432."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import pytest

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def fresh_database() -> Iterator[str]:
    """Creates a uniquely named database, yields its DSN, drops it afterwards; skips the test,
    saying why, only when no server answers."""
    name = f"stack_test_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as error:
        pytest.skip(f"PostgreSQL not reachable at 127.0.0.1:5432: {error}")
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _admin(statement: str) -> None:
    connection = await asyncpg.connect(ADMIN_DSN, timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextmanager
def pgvector_database(root: str) -> Iterator[str]:
    """A PostgreSQL with pgvector, from the `pgserver` package (the machine's server has no
    pgvector), in the folder `root`, listening on a Unix socket there; yields a DSN of a fresh
    database on it and stops the server afterwards."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns of XDG_RUNTIME_DIR on import
        import pgserver  # type: ignore[import-untyped]

    server = pgserver.get_server(root, cleanup_mode="stop")
    try:
        name = f"stack_test_{uuid.uuid4().hex[:12]}"
        server.psql(f'CREATE DATABASE "{name}";')
        yield f"postgresql://postgres@/{name}?host={root}"
    finally:
        server.cleanup()
