"""Tables as the stores declare them, for SQLite and PostgreSQL alike, and their DDL.

A store declares its tables with `Table`, `Column` and `Index`, and the stack makes them
(`Database.create_tables`): each table that does not exist yet, then, on a database made by an
older release, the columns (nullable ones only) and indexes declared since. Nothing is ever
dropped or rewritten. The DDL is the same SQLAlchemy emitted for the same declarations (types,
constraint and index names), so databases made by either are one schema.

Declared here rather than with SQLAlchemy's `Table`: building its metadata, and the library
itself, cost a quarter of the server's start-up and 12 MiB of its idle memory, for statements the
stores now write as SQL (runtime.storage.sql).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Kind:
    """A column's type: its name in SQLite's DDL and in PostgreSQL's, and whether it holds JSON."""

    sqlite: str
    postgresql: str
    json: bool = False

    def sql(self, dialect: str) -> str:
        return self.postgresql if dialect == "postgresql" else self.sqlite


def String(length: int) -> Kind:  # noqa: N802  (read as a type, as in the declarations)
    """Text of at most `length` characters (VARCHAR)."""
    return Kind(f"VARCHAR({length})", f"VARCHAR({length})")


TEXT = Kind("TEXT", "TEXT")
INTEGER = Kind("INTEGER", "INTEGER")
BIGINT = Kind("BIGINT", "BIGINT")
FLOAT = Kind("FLOAT", "FLOAT")
BOOLEAN = Kind("BOOLEAN", "BOOLEAN")
JSON = Kind("JSON", "JSONB", json=True)
"""A JSON document: JSONB on PostgreSQL (indexable, compact), JSON text on SQLite. Written from
and read as JSON text (runtime.storage.sql)."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column. `default`: the value an insert that leaves the column out gives it. `serial`: an
    INTEGER primary key numbered by the database (SQLite's rowid, PostgreSQL's SERIAL)."""

    name: str
    kind: Kind
    nullable: bool = True
    primary_key: bool = False
    default: Any = None
    index: bool = False
    unique: bool = False
    serial: bool = False


@dataclass(frozen=True, slots=True)
class Index:
    """An index on `columns`, partial where `where` (SQL, the same on both databases) is given."""

    name: str
    columns: tuple[str, ...]
    unique: bool = False
    where: str | None = None


@dataclass(frozen=True, slots=True)
class Unique:
    """A named UNIQUE constraint over several columns."""

    name: str
    columns: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Table:
    """A table: its columns in order, its indexes and its multi-column UNIQUE constraints. One object
    per table (equal to itself only: its hash is the object's own, which caches look up fastest)."""

    name: str
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()
    uniques: tuple[Unique, ...] = ()
    by_name: dict[str, Column] = field(init=False, repr=False)
    defaults: dict[str, Any] = field(init=False, repr=False)  # the columns' `default`s, by name
    json: frozenset[str] = field(init=False, repr=False)  # the JSON columns' names

    def __post_init__(self) -> None:
        # (frozen: each set once, here)
        object.__setattr__(self, "by_name", {column.name: column for column in self.columns})
        object.__setattr__(self, "defaults", {column.name: column.default for column in self.columns if column.default is not None})
        object.__setattr__(self, "json", frozenset(column.name for column in self.columns if column.kind.json))
        if len(self.by_name) != len(self.columns):
            raise ValueError(f"table {self.name}: a column is declared twice")

    def all_indexes(self) -> tuple[Index, ...]:
        """The declared indexes and those of columns declared `index=True` (named as SQLAlchemy names them)."""
        single = tuple(Index(f"ix_{self.name}_{column.name}", (column.name,), unique=column.unique)
                       for column in self.columns if column.index)
        return single + self.indexes


def table(name: str, *parts: Column | Index | Unique) -> Table:
    """`Table` from its columns, indexes and constraints in declaration order."""
    return Table(name, tuple(part for part in parts if isinstance(part, Column)),
                 tuple(part for part in parts if isinstance(part, Index)), tuple(part for part in parts if isinstance(part, Unique)))


def create_table_sql(declared: Table, dialect: str) -> str:
    """`CREATE TABLE IF NOT EXISTS` for `declared` on `dialect`."""
    lines = [_column_sql(column, dialect) for column in declared.columns]
    keys = [column.name for column in declared.columns if column.primary_key]
    if keys:
        lines.append(f"PRIMARY KEY ({', '.join(keys)})")
    lines += [f"UNIQUE ({column.name})" for column in declared.columns if column.unique and not column.index]
    lines += [f"CONSTRAINT {unique.name} UNIQUE ({', '.join(unique.columns)})" for unique in declared.uniques]
    return f"CREATE TABLE IF NOT EXISTS {declared.name} (\n\t" + ", \n\t".join(lines) + "\n)"


def _column_sql(column: Column, dialect: str) -> str:
    kind = "SERIAL" if column.serial and dialect == "postgresql" else column.kind.sql(dialect)
    return f"{column.name} {kind}" + ("" if column.nullable and not column.primary_key else " NOT NULL")


def create_index_sql(declared: Table, index: Index) -> str:
    """`CREATE [UNIQUE] INDEX IF NOT EXISTS`, the same on both databases."""
    unique = "UNIQUE " if index.unique else ""
    where = f" WHERE {index.where}" if index.where is not None else ""
    return f"CREATE {unique}INDEX IF NOT EXISTS {index.name} ON {declared.name} ({', '.join(index.columns)}){where}"


def add_column_sql(declared: Table, column: Column, dialect: str) -> str:
    """The additive migration of a column declared after its table was made: nullable only, so the
    rows already there stay valid."""
    if not column.nullable or column.primary_key:
        raise RuntimeError(f"table {declared.name}: cannot add the NOT NULL column {column.name} to existing rows")
    return f"ALTER TABLE {declared.name} ADD COLUMN {_column_sql(column, dialect)}"


def columns_present_sql(dialect: str) -> str:
    """A query for the names of a table's columns (`:name`), none if the table is not there."""
    if dialect == "postgresql":
        return ("SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = :name")
    return "SELECT name FROM pragma_table_info(:name)"


def missing_columns(declared: Table, present: Sequence[str]) -> list[Column]:
    """The declared columns a table made earlier does not have."""
    have = set(present)
    return [column for column in declared.columns if column.name not in have]
