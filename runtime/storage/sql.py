"""Statements as SQL text, run on the database's own driver: `Sql`, the caller's rows (`Scoped`), and
the inserts of declared tables.

A statement is written once, with `:name` parameters, for both databases (or with a text of its own
for PostgreSQL where the two differ). Its text is numbered once per statement (`?1` for SQLite,
`$1` for asyncpg) and its values passed by position. Parameters named in `json=` are JSON
documents, written as JSON text (on PostgreSQL with each NUL character as U+FFFD: JSONB holds
none). JSON columns are read back as text (`CAST(col AS TEXT)`, the same on both) and decoded by
the caller, or sent on as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract import fastjson
from contract.caller import granted_owners
from runtime.storage import driver
from runtime.storage.driver import Ran
from runtime.storage.schema import Table

# `:name`, not PostgreSQL's `::type` cast, nor anything in a quoted literal (matched whole, and left as it is).
_PARAMETER = re.compile(r"'(?:[^']|'')*'|(?<![:\w]):([A-Za-z_]\w*)")
_NUL_ESCAPE = re.compile(r"(\\+)u0000")
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)


def _numbered(text: str, mark: str) -> tuple[str, tuple[str, ...]]:
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found[1] is None:
            return found[0]
        if found[1] not in names:
            names.append(found[1])
        return f"{mark}{names.index(found[1]) + 1}"

    return _PARAMETER.sub(number, text), tuple(names)


def json_text(value: Any) -> str:
    """JSON text for SQLite's JSON columns."""
    return fastjson.dumps(value).decode()


def jsonb_text(value: Any) -> str:
    """JSON for PostgreSQL's JSONB, which holds no NUL character: each one (a `\u0000` escape, not
    a literal backslash before `u0000`) is stored as U+FFFD, the replacement character. A model's
    answer or a client's text holding one is then kept, not refused: SQLite and OpenAI take it."""
    text = fastjson.dumps(value).decode()
    if "u0000" not in text:
        return text
    return _NUL_ESCAPE.sub(lambda run: run[1] + ("ufffd" if len(run[1]) % 2 else "u0000"), text)


def loads(text: str | bytes | None) -> Any:
    """A JSON column read as text, decoded (None stays None: SQL NULL)."""
    return None if text is None else fastjson.loads(text)


class Sql:
    """One statement: `text` for both databases (or `postgresql` for PostgreSQL's own), with
    `:name` parameters; those named in `json` are JSON documents."""

    __slots__ = ("text", "postgresql", "json", "_numbered", "_sqlite", "_returns_rows")

    def __init__(self, text: str, *, postgresql: str | None = None, json: Sequence[str] = ()) -> None:
        self.text = text
        self.postgresql = postgresql if postgresql is not None else text
        self.json = frozenset(json)
        self._numbered: tuple[str, tuple[str, ...]] | None = None
        self._sqlite: tuple[str, tuple[str, ...]] | None = None
        self._returns_rows: bool | None = None

    def __repr__(self) -> str:
        return f"Sql({self.text!r})"

    def numbered(self) -> tuple[str, tuple[str, ...]]:
        """PostgreSQL's text with `$n` parameters, and the names they stand for, in order."""
        if self._numbered is None:
            self._numbered = _numbered(self.postgresql, "$")
        return self._numbered

    def sqlite_numbered(self) -> tuple[str, tuple[str, ...]]:
        """SQLite's text with `?n` parameters, and the names they stand for, in order: values passed
        by position, where SQLite's driver would look each `:name` up in a mapping."""
        if self._sqlite is None:
            self._sqlite = _numbered(self.text, "?")
        return self._sqlite

    def returns_rows(self) -> bool:
        """Whether it returns rows (a query, or a change with RETURNING) rather than a count."""
        if self._returns_rows is None:
            self._returns_rows = (self.postgresql.lstrip()[:6].upper() not in ("INSERT", "UPDATE", "DELETE")
                                  or _RETURNING.search(self.postgresql) is not None)
        return self._returns_rows

    def sqlite_values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return self._values(self.sqlite_numbered()[1], params, json_text)

    def postgres_values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return self._values(self.numbered()[1], params, jsonb_text)

    def _values(self, names: tuple[str, ...], params: Mapping[str, Any], encode: Callable[[Any], str]) -> tuple[Any, ...]:
        """The values of `names`, in order, the JSON ones (but None: SQL NULL) encoded."""
        if not self.json:
            return tuple([params[name] for name in names])
        return tuple([encode(params[name]) if name in self.json and params[name] is not None else params[name] for name in names])

    def run(self, connection: Any, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None) -> Ran:
        """Execute on `connection` (what `Database.write` or `read_with` gives its work) with `params`:
        one set, or a list of sets (one executemany)."""
        return driver.execute(connection, self, {} if params is None else params)


class Scoped:
    """A statement over rows that have an owner (runtime.security.auth), in the three forms the caller's
    access asks for: `template` holds `{owner}` where the condition on `column` goes (as ` AND
    ...`, so it follows a WHERE of its own). With auth off, no condition; for the caller's own
    rows, `column = :caller`; for the owners an access policy grants, `column IN (...)`, made per
    call. The first two are built once."""

    __slots__ = ("template", "column", "json", "postgresql", "plain", "owned")

    def __init__(self, template: str, column: str, *, json: Sequence[str] = (), postgresql: str | None = None) -> None:
        self.template, self.column, self.json, self.postgresql = template, column, tuple(json), postgresql
        self.plain = self._with("")
        self.owned = self._with(f" AND {column} = :caller")

    def _with(self, condition: str) -> Sql:
        postgresql = self.postgresql.replace("{owner}", condition) if self.postgresql is not None else None
        return Sql(self.template.replace("{owner}", condition), postgresql=postgresql, json=self.json)

    def for_caller(self, params: Mapping[str, Any], action: str = "read") -> tuple[Sql, dict[str, Any]]:
        """The statement and its parameters for the caller to `action` the rows it names."""
        owners = granted_owners(action)
        if owners is None:
            return self.plain, dict(params)
        if len(owners) == 1:
            return self.owned, {**params, "caller": next(iter(owners))}
        condition, granted = _among(self.column, owners)
        return self._with(condition), {**params, **granted}


def owner_condition(column: str, action: str = "read") -> tuple[str, dict[str, Any]]:
    """The condition (` AND ...`, or nothing) and its parameters for the caller to `action` a row
    whose owner is in `column`: for a statement made per call (Scoped, for those made once)."""
    owners = granted_owners(action)
    return ("", {}) if owners is None else _among(column, owners)


def _among(column: str, owners: frozenset[str]) -> tuple[str, dict[str, Any]]:
    listed, granted = in_list("caller", sorted(owners))
    return f" AND {column} IN {listed}", granted


def in_list(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """`(:name_0, :name_1, ...)` for an IN condition over `values`, and its parameters. (The text
    depends only on how many there are: statements made from it repeat.)"""
    params = {f"{name}_{index}": value for index, value in enumerate(values)}
    return "(" + ", ".join(":" + key for key in params) + ")", params


@functools.lru_cache(maxsize=256)
def insert_sql(declared: Table, names: tuple[str, ...]) -> Sql:
    """`INSERT INTO` `declared` of the columns `names` (each row with the same columns)."""
    unknown = [name for name in names if name not in declared.by_name]
    if unknown:
        raise ValueError(f"table {declared.name} has no column {unknown[0]!r}")
    return Sql(f"INSERT INTO {declared.name} ({', '.join(names)}) VALUES ({', '.join(':' + name for name in names)})",
               json=[name for name in names if name in declared.json])


@functools.lru_cache(maxsize=64)
def upsert_sql(declared: Table, names: tuple[str, ...], key: tuple[str, ...], updated: tuple[str, ...] | None = None) -> Sql:
    """Insert a row of the columns `names`, or update the row whose `key` columns (a unique index)
    already match (its columns `updated`, by default `names`): the same `ON CONFLICT` on both databases."""
    insert = insert_sql(declared, names)
    update = [name for name in (names if updated is None else updated) if name not in key]
    on_conflict = (f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET " + ", ".join(f"{name} = excluded.{name}" for name in update)
                   if update else f" ON CONFLICT ({', '.join(key)}) DO NOTHING")
    return Sql(insert.text + on_conflict, json=sorted(insert.json))


def with_defaults(declared: Table, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`rows` with each column they leave out that has a `default` given it (a row that leaves none
    out is the caller's own, not a copy)."""
    defaults = declared.defaults
    if not defaults:
        return list(rows)
    return [row if defaults.keys() <= row.keys() else {**defaults, **row} for row in rows]


@functools.lru_cache(maxsize=64)
def inserts_as_one(shapes: tuple[tuple[Table, tuple[str, ...]], ...]) -> Sql:
    """PostgreSQL: the rows of several tables inserted by one statement. Each table's rows come as
    one JSON array (`:rows0`, `:rows1`...) that `jsonb_to_recordset` reads back into typed rows; the
    tables but the last are inserted from data-modifying WITHs. A None is SQL NULL, in a JSON column
    too, as the inserts of `insert_sql` write it."""
    parts = []
    for index, (declared, names) in enumerate(shapes):
        typed = ", ".join(f"{name} {declared.by_name[name].kind.postgresql}" for name in names)
        parts.append(f"INSERT INTO {declared.name} ({', '.join(names)}) SELECT {', '.join(names)} "
                     f"FROM jsonb_to_recordset(:rows{index}::jsonb) AS rows{index}({typed})")
    *first, last = parts
    text = (("WITH " + ", ".join(f"insert_{index} AS ({part})" for index, part in enumerate(first)) + " ") if first else "") + last
    return Sql(text, json=[f"rows{index}" for index in range(len(shapes))])



class InsertRows:
    """A write that only adds rows, table by table in the order given: `db.write(InsertRows((t1,
    rows1), (t2, rows2)))`. On SQLite, the inserts of a group of such writes queued together are
    made as one executemany per table (in the order the tables first appear), all of it with the
    write lock held that other processes wait on. A group that fails is retried write by write, as
    any group is, so a write's failure stays its own.

    On PostgreSQL the inserts are one statement (`alone_on_postgres`), run in autocommit: one round
    trip where BEGIN, an insert a table and COMMIT were four for a response."""

    __slots__ = ("inserts",)

    def __init__(self, *inserts: tuple[Table, Sequence[Mapping[str, Any]]]) -> None:
        self.inserts = [(table, rows) for table, rows in inserts if rows]

    def __call__(self, connection: Any) -> None:
        for table, rows in self.inserts:
            insert_rows(connection, table, rows)

    def alone_on_postgres(self) -> Callable[[Any], None] | None:
        """The inserts as one PostgreSQL statement (`inserts_as_one`); None where a table's rows do
        not all have the same columns."""
        shapes: list[tuple[Table, tuple[str, ...]]] = []
        params: dict[str, Any] = {}
        for index, (table, rows) in enumerate(self.inserts):
            full = with_defaults(table, rows)
            names = tuple(full[0])
            if any(row.keys() != full[0].keys() for row in full):
                return None
            shapes.append((table, names))
            params[f"rows{index}"] = full
        if not shapes:
            return None
        statement = inserts_as_one(tuple(shapes))

        def insert(connection: Any) -> None:
            statement.run(connection, params)

        return insert


def insert_rows(connection: Any, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert `rows` into `table`: one executemany a run of rows with the same columns, in order (a
    serial key numbers them as given)."""
    run: list[Mapping[str, Any]] = []
    for row in with_defaults(table, rows):
        if run and row.keys() != run[0].keys():
            insert_sql(table, tuple(run[0])).run(connection, run)
            run = []
        run.append(row)
    if run:
        insert_sql(table, tuple(run[0])).run(connection, run)
