"""The schema's creation and additive migrations (`make_tables`), under the lock that keeps the
replicas of a stack from changing it at once (`schema_lock`). The DDL itself is runtime.storage.schema's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.storage.driver import dialect_of
from runtime.storage.schema import Table, add_column_sql, columns_present_sql, create_index_sql, create_table_sql, missing_columns
from runtime.storage.sql import Sql

__all__ = ["make_tables", "schema_lock"]

_SCHEMA_LOCK = 0x57AC4  # the advisory lock key under which tables are made or extended
_LOCK_SCHEMA = Sql("SELECT pg_advisory_xact_lock(:key)")


def schema_lock(connection: Any) -> None:
    """Hold, until the connection's transaction ends, the lock under which the schema changes (on
    PostgreSQL): replicas starting together on a fresh database would otherwise race to create
    the same tables, types, extensions and indexes, and all but one would fail to start."""
    if dialect_of(connection) == "postgresql":
        _LOCK_SCHEMA.run(connection, {"key": _SCHEMA_LOCK})


def make_tables(connection: Any, tables: Sequence[Table]) -> None:
    """The tables made where absent, or extended by the columns (nullable ones only) and indexes a
    newer release declares: nothing is ever dropped or rewritten."""
    dialect = dialect_of(connection)
    columns_present = Sql(columns_present_sql(dialect))
    for declared in tables:
        present = [name for name, in columns_present.run(connection, {"name": declared.name}).rows]
        if not present:
            Sql(create_table_sql(declared, dialect)).run(connection)
        for column in missing_columns(declared, present) if present else ():
            Sql(add_column_sql(declared, column, dialect)).run(connection)
        for index in declared.all_indexes():
            Sql(create_index_sql(declared, index)).run(connection)
