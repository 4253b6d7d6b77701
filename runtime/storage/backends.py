"""The named backends of a stack (`Storage`): which `Database` each store keeps its records in,
each opened by `open_database` from its configuration on first use, and closed together."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from builder.config import STORE_NAMES, PostgresBackend, SqliteBackend, StorageConfig
from runtime.storage.database import Database
from runtime.storage.postgres import PgPool, asyncpg_dsn

__all__ = ["Storage", "open_database"]


def open_database(backend: SqliteBackend | PostgresBackend) -> Database:
    """A Database for one configured backend. Nothing is connected until first use."""
    if isinstance(backend, SqliteBackend):
        path = backend.path.expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return Database("sqlite", sqlite_path=path)
    dsn = asyncpg_dsn(backend.dsn)
    return Database("postgresql", pg=PgPool(dsn, backend.pool_size, backend.connect_timeout_s, backend.command_timeout_s), listen_dsn=dsn)


class Storage:
    """The named backends of one stack: opened on first use, shared by stores, closed together."""

    def __init__(self, config: StorageConfig, default_sqlite_path: Path) -> None:
        self._config = config
        self._default_sqlite_path = default_sqlite_path
        self._databases: dict[str, Database] = {}

    def database(self, store: str) -> Database:
        """The Database the store named `store` (one of STORE_NAMES) keeps its records in."""
        if store not in STORE_NAMES:
            raise ValueError(f"unknown store {store!r}; expected one of {', '.join(STORE_NAMES)}")
        name: str = getattr(self._config.stores, store)
        database = self._databases.get(name)
        if database is None:
            backend = self._config.backends.get(name)
            if backend is None:
                if name != "default":
                    raise ValueError(
                        f"store {store!r} uses backend {name!r}, which storage.backends "
                        "does not declare"
                    )
                backend = SqliteBackend(type="sqlite", path=self._default_sqlite_path)
            database = self._databases[name] = open_database(backend)
        return database

    async def health(self) -> dict[str, dict[str, Any]]:
        """Each opened backend's state, by name: `ok`, or `unavailable` with the reason."""
        names = list(self._databases)
        reasons = await asyncio.gather(*(self._databases[name].ping() for name in names))
        return {name: {"status": "ok" if reason is None else "unavailable", "dialect": self._databases[name].dialect, "detail": reason}
                for name, reason in zip(names, reasons)}

    async def close(self) -> None:
        """Close every opened backend."""
        databases, self._databases = list(self._databases.values()), {}
        for database in databases:
            await database.close()
