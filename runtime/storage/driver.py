"""Where a statement meets the database's driver: sqlean's connection on SQLite, run as it is; on
PostgreSQL a `PgConnection` (runtime.storage.postgres), which runs it on asyncpg from the work
function's greenlet. What every statement comes back as (`Ran`), and the one driver error callers
tell apart (`IntegrityError`); other driver errors are raised as they are, for
`runtime.storage.outage` to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, cast

import sqlean as sqlite3  # type: ignore[import-untyped]


class IntegrityError(Exception):
    """A statement broke a constraint of the database (a duplicate key, say); `orig` is the driver's error."""

    def __init__(self, statement: str, orig: BaseException) -> None:
        super().__init__(f"{type(orig).__name__}: {orig}")
        self.statement = statement
        self.orig = orig


class Ran(NamedTuple):
    """What a statement did: the rows it returned (a SELECT, or RETURNING) and the rows it matched."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def scalar(self) -> Any:
        """The first column of the first row returned, or None."""
        return self.rows[0][0] if self.rows else None

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


class Statement(Protocol):
    """What a connection runs (runtime.storage.sql.Sql)."""

    text: str

    def sqlite_numbered(self) -> tuple[str, tuple[str, ...]]: ...

    def sqlite_values(self, params: Mapping[str, Any]) -> tuple[Any, ...]: ...


class Connection(Protocol):
    """A connection of a database other than SQLite, as a work function is given it."""

    dialect: str

    def run(self, statement: Any, batch: Sequence[Mapping[str, Any]], many: bool) -> Ran: ...


def execute(connection: Any, statement: Statement, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Ran:
    """Run `statement` with `params` (one set, or a list of sets: one executemany) on `connection`."""
    many = not isinstance(params, Mapping)
    batch: Sequence[Mapping[str, Any]] = cast(Sequence[Mapping[str, Any]], params) if many else [cast(Mapping[str, Any], params)]
    if many and not batch:
        return Ran([], 0)
    if not isinstance(connection, sqlite3.Connection):
        return cast(Connection, connection).run(statement, batch, many)
    text, _ = statement.sqlite_numbered()
    try:
        if many and len(batch) > 1:
            cursor = connection.executemany(text, [statement.sqlite_values(one) for one in batch])
            return Ran([], cursor.rowcount)
        cursor = connection.execute(text, statement.sqlite_values(batch[0]))
        rows = cursor.fetchall()
    except sqlite3.IntegrityError as error:
        raise IntegrityError(text, error) from error
    return Ran(rows, len(rows) if rows else cursor.rowcount)


def dialect_of(connection: Any) -> str:
    """"sqlite" or "postgresql": which database a work function's connection is of."""
    return "sqlite" if isinstance(connection, sqlite3.Connection) else str(cast(Connection, connection).dialect)
