"""Statements of the hot paths: built once, run on the driver where SQLAlchemy's execution layer
costs more than the work (`Prepared`), rows added as one write (`InsertRows`), the caller's rows
(`caller_may`, `for_caller`), and the JSON column type with its codec."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import sqlalchemy as sa
import sqlean as sqlite3  # type: ignore[import-untyped]
from sqlalchemy.util import await_only

from runtime import fastjson
from runtime.auth import granted_owners
from runtime.storage.schema import Table
from runtime.storage.driver import Ran
from runtime.storage.sql import inserts_as_one, insert_sql, json_text, jsonb_text, with_defaults


def caller_may(action: str, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """The condition that the caller may `action` (read, update, delete) a row whose owner is in
    `column` (runtime.auth): its own rows, those the access policy grants, every row with auth
    off and for the server's own work outside a request."""
    owners = granted_owners(action)
    if owners is None:
        return sa.true()
    return column == next(iter(owners)) if len(owners) == 1 else column.in_(sorted(owners))


def for_caller(plain: Any, owned: Any, column: sa.ColumnElement[Any], params: dict[str, Any], action: str = "read",
               bind: str = "caller", among: Callable[[sa.ColumnElement[bool]], Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """A prebuilt statement (or `Prepared` one) and its parameters for the caller to `action` rows whose owner is in
    `column` (`caller_may` for statements built once, on hot paths): `plain` with auth off, `owned`
    (filtered by owner = `:bind`) for the caller's own, else the statement for the owners the access
    policy grants: `plain` filtered by them, or `among(condition)` for a statement that holds the
    condition inside it (an INSERT ... SELECT), built per call and run by SQLAlchemy."""
    owners = granted_owners(action)
    if owners is None:
        return plain, params
    if len(owners) == 1:
        return owned, {**params, bind: next(iter(owners))}
    condition = column.in_(sorted(owners))
    if isinstance(plain, Prepared):
        statement = among(condition) if among is not None else cast(Any, plain.statement).where(condition)
        return Prepared(statement, on_driver=False), params
    return (among(condition) if among is not None else plain.where(condition)), params


def json_type() -> sa.types.TypeEngine[Any]:
    """A JSON column type: JSONB on PostgreSQL (indexable, compact), JSON text elsewhere."""
    return _JSON()


class _JSON(sa.types.TypeDecorator[Any]):
    # Chosen per dialect rather than with `with_variant(JSONB(), ...)`, which would import the
    # PostgreSQL dialect (and its drivers' modules: 22 ms at start-up) on stacks that use SQLite.
    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(sa.JSON())


# JSON columns are (de)serialised with the fast codec: a stored response is a large document.
JSON_CODEC: dict[str, Any] = {"json_serializer": json_text, "json_deserializer": fastjson.loads}

POSTGRES_JSON_CODEC: dict[str, Any] = {"json_serializer": jsonb_text, "json_deserializer": fastjson.loads}


class InsertRows:
    """A write that only adds rows, table by table in the order given: `db.write(InsertRows((t1,
    rows1), (t2, rows2)))`. On SQLite, the inserts of a group of such writes queued together are
    made as one `executemany` per table (in the order the tables first appear), where each write
    alone would run its own statements (SQLAlchemy's work per statement was 60 % of the writing
    thread's time, all of it with the write lock held that other processes wait on). A group that
    fails is retried write by write, as any group is, so a write's failure stays its own.

    On PostgreSQL the inserts are one statement where they can be (`alone_on_postgres`), run in
    autocommit: one round trip where BEGIN, an insert a table and COMMIT were four for a response."""

    __slots__ = ("inserts",)

    def __init__(self, *inserts: tuple[sa.Table | Table, Sequence[dict[str, Any]]]) -> None:
        self.inserts = [(table, rows) for table, rows in inserts if rows]

    def __call__(self, connection: sa.Connection) -> None:
        for table, rows in self.inserts:
            insert_rows(connection, table, rows)

    def alone_on_postgres(self) -> Callable[[sa.Connection], None] | None:
        """The inserts as one PostgreSQL statement: each table's rows sent as one JSON array and
        read back into typed rows by `jsonb_to_recordset`, the tables but the last inserted from
        data-modifying WITHs. None where that would not insert what separate inserts would: a
        column of a type JSON does not carry as such (only strings, numbers, booleans and JSON
        columns do), rows with different columns, or a column left to a default computed in Python."""
        declared = [(table, rows) for table, rows in self.inserts if isinstance(table, Table)]
        if len(declared) == len(self.inserts):
            return _declared_alone_on_postgres(declared)
        shapes: list[tuple[sa.Table, tuple[str, ...]]] = []
        params: dict[str, Any] = {}
        for index, (table, rows) in enumerate(cast(list[tuple[sa.Table, Sequence[dict[str, Any]]]], self.inserts)):
            names = tuple(rows[0])
            if not _carried_by_json(table, names) or any(row.keys() != rows[0].keys() for row in rows):
                return None
            shapes.append((table, names))
            params[f"rows{index}"] = list(rows)
        if not shapes:
            return None
        statement = _inserts_as_one(tuple(shapes))

        def insert(connection: sa.Connection) -> None:
            statement.run(connection, params)

        return insert


def _declared_alone_on_postgres(inserts: list[tuple[Table, Sequence[dict[str, Any]]]]) -> Callable[[sa.Connection], None] | None:
    shapes: list[tuple[Table, tuple[str, ...]]] = []
    params: dict[str, Any] = {}
    for index, (table, rows) in enumerate(inserts):
        full = with_defaults(table, rows)
        names = tuple(full[0])
        if any(row.keys() != full[0].keys() for row in full):
            return None
        shapes.append((table, names))
        params[f"rows{index}"] = full
    if not shapes:
        return None
    statement = inserts_as_one(tuple(shapes))

    def insert(connection: sa.Connection) -> None:
        statement.run(connection, params)

    return insert


def insert_rows(connection: sa.Connection, table: sa.Table | Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert `rows` into `table`: one executemany a run of rows with the same columns, in order (a
    serial key numbers them as given)."""
    if not isinstance(table, Table):
        insert_into(table).run(connection, list(rows))
        return
    run: list[dict[str, Any]] = []
    for row in with_defaults(table, rows):
        if run and row.keys() != run[0].keys():
            insert_sql(table, tuple(run[0])).run(connection, run)
            run = []
        run.append(row)
    if run:
        insert_sql(table, tuple(run[0])).run(connection, run)


_JSON_CARRIED = (sa.String, sa.Integer, sa.Float, sa.Boolean)


def _carried_by_json(table: sa.Table, names: tuple[str, ...]) -> bool:
    if any(name not in table.c or not isinstance(table.c[name].type, (*_JSON_CARRIED, _JSON)) or isinstance(table.c[name].type, sa.Enum)
           for name in names):
        return False
    return all(column.default is None for column in table.c if column.name not in names)


def rows_of_json(table: sa.Table, names: Sequence[str], param: str) -> tuple[sa.TableValuedAlias, list[sa.ColumnElement[Any]]]:
    """PostgreSQL: rows of `table`'s columns `names` sent as one JSON array (bind parameter `param`,
    a list of dicts), as `jsonb_to_recordset` reads them back into typed rows: the FROM clause, and
    the values to select from it for an `INSERT ... SELECT` (None in a JSON column as JSON null,
    as SQLAlchemy writes it). See `InsertRows.alone_on_postgres` for the columns JSON carries."""
    records = (sa.func.jsonb_to_recordset(sa.bindparam(param, type_=json_type()))
               .table_valued(*[sa.column(name, table.c[name].type) for name in names])
               .render_derived(name=param, with_types=True))
    # A JSON null comes out as SQL NULL.
    values: list[sa.ColumnElement[Any]] = [
        sa.func.coalesce(records.c[name], sa.literal_column("'null'::jsonb")) if isinstance(table.c[name].type, _JSON) else records.c[name]
        for name in names]
    return records, values


@functools.lru_cache(maxsize=64)
def _inserts_as_one(shapes: tuple[tuple[sa.Table, tuple[str, ...]], ...]) -> Prepared:
    statements = []
    for index, (table, names) in enumerate(shapes):
        records, values = rows_of_json(table, names, f"rows{index}")
        statements.append(table.insert().from_select(list(names), sa.select(*values).select_from(records)))
    *first, last = statements
    return Prepared(last.add_cte(*[statement.cte(f"insert_{index}") for index, statement in enumerate(first)]) if first else last)


@functools.lru_cache(maxsize=256)
def insert_into(table: sa.Table) -> Prepared:
    """`table.insert()`, built once per table, as a `Prepared` statement: run it with the rows
    to insert (each with the same columns)."""
    return Prepared(table.insert())


class _Compiled(NamedTuple):
    sql: str
    names: tuple[str, ...]  # of the positional parameters, in order
    constants: dict[str, Any]  # values the statement holds itself (`column == "output"`)
    processors: tuple[Callable[[Any], Any] | None, ...]
    returns_rows: bool

    def values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        values = []
        for name, processor in zip(self.names, self.processors):
            value = params[name] if name in params else self.constants[name]
            # None goes through the processor too, as SQLAlchemy sends it: JSON null in a JSON column.
            values.append(value if processor is None else processor(value))
        return tuple(values)


class Prepared:
    """A statement of a hot path, built once. It is compiled once per database dialect and set of
    parameter names and run on the driver's connection beneath `connection`, with SQLAlchemy's
    bind processing (JSON is written by the same serializer), where that is the same as
    SQLAlchemy running it:

    - on SQLite, in the connection's transaction: SQLAlchemy's execution layer cost twice what
      SQLite's own work did per statement (54 of the 142 µs of a conversation append);
    - on PostgreSQL, when the connection is in autocommit (`read_with`, `write(one_statement=True)`):
      a read by primary key took 340 µs through SQLAlchemy and 210 on asyncpg directly. In a
      transaction SQLAlchemy runs it, as it begins the transaction with its first statement.

    Otherwise, and for a statement SQLAlchemy must finish at run time (expanding IN parameters,
    column defaults computed in Python) or one that returns a JSON column (decoded by SQLAlchemy
    alike on both databases; cast it to Text to have it run here, as its stored text), SQLAlchemy
    runs it as usual. `on_driver=False` says so up front, for a statement built per call (it would
    be compiled at each run only to find that out: 140 µs), which SQLAlchemy then takes from its
    own cache of compiled statements."""

    __slots__ = ("statement", "_compiled", "_on_driver")

    def __init__(self, statement: sa.Executable, *, on_driver: bool = True) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, ...], _Compiled | None] = {}  # by dialect and parameter names
        self._on_driver = on_driver

    def run(self, connection: sa.Connection, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Ran:
        """Execute with `params`: one set, or a list of sets (run as one executemany)."""
        many = not isinstance(params, Mapping)
        batch: Sequence[Mapping[str, Any]] = params if not isinstance(params, Mapping) else [params]
        driver = connection.connection.driver_connection if self._on_driver and batch else None
        if isinstance(driver, sqlite3.Connection) and (compiled := self._compiled_for(connection.dialect, batch[0])) is not None:
            return _run_on_sqlite(driver, compiled, batch, many)
        if (driver is not None and connection.dialect.name == "postgresql" and cast(Any, connection.connection.dbapi_connection).autocommit
                and (compiled := self._compiled_for(connection.dialect, batch[0])) is not None):
            return _run_on_asyncpg(driver, compiled, batch, many)
        # The async engine's aiosqlite, a PostgreSQL transaction, or no compiled form: SQLAlchemy's way.
        result = connection.execute(self.statement, list(batch) if many else batch[0])
        return Ran([tuple(row) for row in result] if result.returns_rows else [], result.rowcount)

    def _compiled_for(self, dialect: sa.Dialect, params: Mapping[str, Any]) -> _Compiled | None:
        key = (dialect.name, *params)
        if key not in self._compiled:
            self._compiled[key] = _compile(self.statement, dialect, tuple(params))
        return self._compiled[key]


def _run_on_sqlite(driver: Any, compiled: _Compiled, batch: Sequence[Mapping[str, Any]], many: bool) -> Ran:
    try:
        if many and len(batch) > 1:
            cursor = driver.executemany(compiled.sql, [compiled.values(one) for one in batch])
            return Ran([], cursor.rowcount)
        cursor = driver.execute(compiled.sql, compiled.values(batch[0]))
        rows = cursor.fetchall()
    except sqlite3.DatabaseError as error:
        # As SQLAlchemy would raise it: callers tell an IntegrityError (a duplicate id) apart.
        raise sa.exc.DBAPIError.instance(compiled.sql, None, error, sqlite3.Error) from error
    return Ran(rows, len(rows) if rows else cursor.rowcount)


def _run_on_asyncpg(driver: Any, compiled: _Compiled, batch: Sequence[Mapping[str, Any]], many: bool) -> Ran:
    """In SQLAlchemy's greenlet (`run_sync`), as its own asyncpg adapter calls asyncpg."""
    import asyncpg  # type: ignore[import-untyped]  # (a stack on SQLite never imports it)

    try:
        if many and len(batch) > 1:
            await_only(driver.executemany(compiled.sql, [compiled.values(one) for one in batch]))
            return Ran([], len(batch))
        values = compiled.values(batch[0])
        if compiled.returns_rows:
            rows = [tuple(row) for row in await_only(driver.fetch(compiled.sql, *values))]
            return Ran(rows, len(rows))
        status: str = await_only(driver.execute(compiled.sql, *values))  # "UPDATE 3", "INSERT 0 1"
        count = status.rsplit(" ", 1)[-1]
        return Ran([], int(count) if count.isdigit() else -1)
    except asyncpg.PostgresError as error:
        # As SQLAlchemy would raise it, a DBAPIError; an IntegrityError for a violated constraint.
        kind = sa.exc.IntegrityError if str(getattr(error, "sqlstate", "")).startswith("23") else sa.exc.DBAPIError
        raise kind(compiled.sql, None, error) from error


def _compile(statement: sa.Executable, dialect: sa.Dialect, names: tuple[str, ...]) -> _Compiled | None:
    compiled = cast(Any, statement).compile(dialect=dialect, column_keys=list(names) if isinstance(statement, sa.Insert) else None)
    order = compiled.positiontup
    if order is None or compiled.insert_prefetch or compiled.update_prefetch or any(bind.expanding for bind in compiled.binds.values()):
        return None  # SQLAlchemy fills these in at run time (its postfetch, for the ORM, is not needed)
    if any(isinstance(column.type, (_JSON, sa.JSON)) for column in getattr(statement, "exported_columns", ())):
        return None  # the drivers return JSON as text (SQLite) or decoded (asyncpg): SQLAlchemy decodes both alike
    constants = {name: bind.effective_value for name, bind in compiled.binds.items() if name not in names and bind.callable is None
                 and not bind.required}
    processors = tuple(compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in order)
    writes = compiled.isinsert or compiled.isupdate or compiled.isdelete
    return _Compiled(compiled.string, tuple(order), constants, processors, not writes or bool(compiled.effective_returning))
