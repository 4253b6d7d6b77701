"""`Sql` statements run on the driver's connection beneath the one a `Database.write` or `read_with`
gives: sqlean's on SQLite, in the connection's transaction; asyncpg's on PostgreSQL, at once in
autocommit and through the connection's own execution in a transaction (which it begins with its
first statement). A driver's error is raised as SQLAlchemy's `DBAPIError` around it (an
`IntegrityError` for a violated constraint), as the connection's own statements raise it, so that
callers and `runtime.storage.outage` tell failures apart one way.

The connections are still SQLAlchemy's; this module is where a statement meets them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import sqlalchemy as sa
import sqlean as sqlite3  # type: ignore[import-untyped]
from sqlalchemy.util import await_only

if TYPE_CHECKING:
    from runtime.storage.sql import Sql

IntegrityError = sa.exc.IntegrityError
"""A statement broke a constraint of the database (a duplicate key, say)."""

_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)


class Ran(NamedTuple):
    """What a statement did: the rows it returned (a SELECT, or RETURNING) and the rows it matched."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def scalar(self) -> Any:
        """The first column of the first row returned, or None."""
        return self.rows[0][0] if self.rows else None

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


def execute(connection: sa.Connection, statement: Sql, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Ran:
    many = not isinstance(params, Mapping)
    batch: Sequence[Mapping[str, Any]] = cast(Sequence[Mapping[str, Any]], params) if many else [cast(Mapping[str, Any], params)]
    if many and not batch:
        return Ran([], 0)
    driver = connection.connection.driver_connection
    if connection.dialect.name == "postgresql":
        text, _ = statement.numbered()
        values = [statement.postgres_values(one) for one in batch]
        if cast(Any, connection.connection.dbapi_connection).autocommit:
            return _on_asyncpg(driver, text, values, many)
        result = connection.exec_driver_sql(text, values if many and len(values) > 1 else values[0])
        return Ran([tuple(row) for row in result] if result.returns_rows else [], result.rowcount)
    if not isinstance(driver, sqlite3.Connection):
        # The async engine's (aiosqlite): its own execution, which takes `:name` parameters as they are.
        rows = [statement.sqlite_params(one) for one in batch]
        result = connection.exec_driver_sql(statement.text, rows if many and len(rows) > 1 else rows[0])
        return Ran([tuple(row) for row in result] if result.returns_rows else [], result.rowcount)
    try:
        if many and len(batch) > 1:
            cursor = driver.executemany(statement.text, [statement.sqlite_params(one) for one in batch])
            return Ran([], cursor.rowcount)
        cursor = driver.execute(statement.text, statement.sqlite_params(batch[0]))
        rows = cursor.fetchall()
    except sqlite3.DatabaseError as error:
        raise sa.exc.DBAPIError.instance(statement.text, None, error, sqlite3.Error) from error
    return Ran(rows, len(rows) if rows else cursor.rowcount)


def _on_asyncpg(driver: Any, text: str, values: list[tuple[Any, ...]], many: bool) -> Ran:
    """In SQLAlchemy's greenlet (`run_sync`), as its own asyncpg adapter calls asyncpg."""
    import asyncpg  # type: ignore[import-untyped]  # (a stack on SQLite never imports it)

    try:
        if many and len(values) > 1:
            await_only(driver.executemany(text, values))
            return Ran([], len(values))
        if _returns_rows(text):
            rows = [tuple(row) for row in await_only(driver.fetch(text, *values[0]))]
            return Ran(rows, len(rows))
        status: str = await_only(driver.execute(text, *values[0]))  # "UPDATE 3", "INSERT 0 1"
        count = status.rsplit(" ", 1)[-1]
        return Ran([], int(count) if count.isdigit() else -1)
    except asyncpg.PostgresError as error:
        kind = sa.exc.IntegrityError if str(getattr(error, "sqlstate", "")).startswith("23") else sa.exc.DBAPIError
        raise kind(text, None, error) from error


@functools.lru_cache(maxsize=512)
def _returns_rows(text: str) -> bool:
    return text.lstrip()[:6].upper() not in ("INSERT", "UPDATE", "DELETE") or _RETURNING.search(text) is not None
