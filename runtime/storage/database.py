"""`Database`, one storage backend (SQLite or PostgreSQL) behind one interface, made by
`open_database`; `Storage`, the named backends of a stack; the schema's creation and additive
migrations."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlalchemy as sa
import sqlean as sqlite3  # type: ignore[import-untyped]

from builder.config import STORE_NAMES, PostgresBackend, SqliteBackend, StorageConfig
from runtime.signals import MachineSignals
from runtime.storage.postgres import (
    NOTIFY, POSTGRES_SCHEMES, PgConnections, PgListener, autocommitted_read, autocommitted_write, closed_by_server, drop_at_once,
    in_transaction,
)
from runtime.storage.sqlite import (
    BEGIN_OPTION, Busy, Checkpointer, FileLock, Held, async_sqlite_dbapi, hook_sqlite, write_group_sync, write_sync,
)
from runtime.storage.schema import Table, add_column_sql, columns_present_sql, create_index_sql, create_table_sql, missing_columns
from runtime.storage.sql import Sql, upsert_sql
from runtime.storage.statements import JSON_CODEC, POSTGRES_JSON_CODEC, InsertRows
from runtime.storage.outage import outage, unavailable
from runtime.storage.tasks import to_the_end
from runtime.tracing import store_tracing

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")

log = logging.getLogger("stack")

_SCHEMA_LOCK = 0x57AC4  # the advisory lock key under which tables are made or extended
SMALL_WRITE_ROWS = 32  # rows up to which a write of a hot path is `small` (Database.write)
PING_TIMEOUT_S = 2.0  # how long the health route waits for a database's answer
DISPOSE_S = 5.0  # how long closing PostgreSQL's pooled connections may take


class Database:
    """One storage backend behind an SQLAlchemy async engine.

    Made by `open_database`, which also installs the SQLite connection hooks this class relies
    on. `read()` is for reads only; every write goes through `transaction()` (or `execute` /
    `upsert`), since on SQLite that is what holds the write lock. Write transactions on the same
    SQLite database must not be nested in one task: the inner one would wait for the outer one
    forever, so it raises `RuntimeError` instead.
    """

    def __init__(self, dialect: str, make_engine: Callable[[], AsyncEngine], sqlite_sync: sa.Engine | None = None,
                 sqlite_path: Path | None = None, listen_dsn: str | None = None, keep_pg: int = 0, connect_timeout_s: float = 10.0,
                 make_schema_engine: Callable[[], AsyncEngine] | None = None) -> None:
        self._engine: AsyncEngine | None = None
        self._make_schema_engine = make_schema_engine
        self._subscribers: dict[str, list[Callable[[str], None]]] = {}
        self._listener = PgListener(listen_dsn, self._deliver, connect_timeout_s) if listen_dsn is not None else None
        self._ping: asyncio.Task[None] | None = None
        self._make_engine = make_engine
        self.dialect = dialect
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database dialect {self.dialect!r}")
        # PostgreSQL has row-level locking and needs no help; SQLite has one database-wide
        # write lock, and writers queued in-process are fair and cannot time out on it.
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._writer: asyncio.Task[Any] | None = None
        self._queued: list[tuple[Callable[[sa.Connection], Any], asyncio.Future[Any], bool]] = []  # (work, its outcome, small)
        self._committer: asyncio.Task[None] | None = None
        # On SQLite, `write` and the fetches run whole on a thread of their own with the
        # synchronous driver: one hop per transaction, where the async driver makes one per
        # statement (and SQLite releases the GIL while it works).
        self._sync = sqlite_sync
        # One connection each for the writes (one at a time: the write lock) and for the small
        # reads made on the event loop, kept out of the pool between uses (see Held).
        self._writing = Held(sqlite_sync, **{BEGIN_OPTION: "BEGIN IMMEDIATE"}) if sqlite_sync is not None else None
        self._reading = Held(sqlite_sync) if sqlite_sync is not None else None
        self._idle_readers: list[Held] = []  # the reading threads', each taken by one read at a time
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="stack-sqlite-write") if sqlite_sync else None
        self._read_threads = ThreadPoolExecutor(4, thread_name_prefix="stack-sqlite-read") if sqlite_sync else None
        self._sqlite_path = sqlite_path
        self._file_lock = FileLock(sqlite_path.with_name(sqlite_path.name + ".write-lock")) if sqlite_path is not None else None
        self._machine = MachineSignals(sqlite_path.with_name(sqlite_path.name + ".signals"), self._deliver) \
            if sqlite_path is not None else None
        self._checkpointer: Checkpointer | None = None
        # On PostgreSQL, `write` and `read_with` keep up to half the pool's connections checked out
        # between uses (see PgConnections).
        self._pg = PgConnections(self.engine, keep_pg) if self.dialect == "postgresql" else None

    @property
    def engine(self) -> AsyncEngine:
        """The async engine, built on first use."""
        if self._engine is None:
            self._engine = self._make_engine()
        return self._engine

    @property
    def kept_connections(self) -> int:
        """Connections checked out of the pool but idle, kept for the next use (PostgreSQL)."""
        return len(self._pg.idle) if self._pg is not None else 0

    async def create_tables(self, metadata: sa.MetaData | Sequence[Table]) -> None:
        """Create the tables (declared, or of `metadata`) that do not exist yet, and add to tables
        that do the columns (nullable ones only) and indexes declared since they were made."""
        make: Callable[[sa.Connection], None] = (functools.partial(_create_or_extend, metadata=metadata)
                                                 if isinstance(metadata, sa.MetaData) else functools.partial(_make_declared, tables=metadata))
        if self._make_schema_engine is None:
            await self.write(make)
            return
        engine = self._make_schema_engine()
        try:
            async with engine.begin() as connection:
                await connection.run_sync(make)
        finally:
            await engine.dispose()

    async def write(self, work: Callable[[sa.Connection], T], *, small: bool = False, one_statement: bool = False) -> T:
        """Run `work(connection)` in a write transaction, committed if it returns, rolled back
        if it raises. `work` is synchronous: it only executes statements.

        `small`: the write is a few rows, quick to make. On SQLite, small writes are made on the
        event loop itself when no other process is writing, rather than on the writer thread:
        the hop there and back costs more than they do.

        `one_statement`: `work` executes a single statement, atomic by itself. On PostgreSQL it
        is then run in autocommit, without the BEGIN and COMMIT round trips of a transaction
        around it, and a `Prepared` one on asyncpg directly.

        A database that cannot serve (unreachable, out of connections, its disk full, its file
        locked by another process) raises `StorageUnavailableError`, a 503 the client may retry."""
        if (tracing := store_tracing()) is not None:
            return await tracing.store("write", self.dialect, self.write(work, small=small, one_statement=one_statement))
        try:
            return await self._write(work, small, one_statement)
        except Exception as error:
            if (down := unavailable(error, f"a write to {self.dialect}")) is None:
                raise
            raise down from error

    async def _write(self, work: Callable[[sa.Connection], T], small: bool, one_statement: bool) -> T:
        if self._pg is not None:
            if isinstance(work, InsertRows) and (alone := work.alone_on_postgres()) is not None:
                work, one_statement = cast(Callable[[sa.Connection], T], alone), True
            step = autocommitted_write if one_statement else in_transaction
            return await self._pg.run(step, work)
        if self._writing is None or self._write_lock is None or self._write_thread is None:
            async with self.engine.begin() as conn:
                return await conn.run_sync(work)
        if self._writer is not None and self._writer is asyncio.current_task():
            raise RuntimeError("nested write transaction on the same SQLite database")
        self._start_checkpoints()
        loop = asyncio.get_running_loop()
        if not small and self._committer is None and not self._write_lock.locked():
            # Nobody else is writing: no group to form, so no task to form it in.
            async with self._write_lock:
                return await to_the_end(loop.run_in_executor(self._write_thread, write_sync, self._writing, work, self._file_lock))
        done: asyncio.Future[T] = loop.create_future()
        self._queued.append((work, done, small))
        if self._committer is None:
            self._committer = loop.create_task(self._commit_queued())
        return await done

    async def _commit_queued(self) -> None:
        """Run the queued writes, a group per transaction, until none is left.

        A group of small writes only is made right here on the event loop if no other process
        holds the write lock: 0.53 -> 0.41 ms for a conversation append at c=1, and at c=32 the
        same groups as on the writer thread (the writes queued while the loop ran everything
        else that was ready). Not a large write: the loop would stand still while SQLite works,
        where the thread lets it run."""
        assert self._write_lock is not None and self._writing is not None
        loop = asyncio.get_running_loop()
        group: list[tuple[Callable[[sa.Connection], Any], asyncio.Future[Any], bool]] = []
        try:
            while self._queued:
                async with self._write_lock:
                    group, self._queued = self._queued, []
                    group = [queued for queued in group if not queued[1].cancelled()]
                    works = [work for work, _, _ in group]
                    outcomes = None
                    if self._file_lock is not None and all(small for _, _, small in group) and self._file_lock.acquire_now():
                        try:
                            outcomes = write_group_sync(self._writing, works, wait=False)
                        except Busy:
                            # Another program (a backup, the sqlite3 shell) holds SQLite's write
                            # lock: waited for on the writer thread, where SQLite's wait of up to
                            # 5 s would otherwise stop the event loop and every request with it.
                            pass
                        finally:
                            self._file_lock.release()
                    if outcomes is None:
                        outcomes = await to_the_end(
                            loop.run_in_executor(self._write_thread, write_group_sync, self._writing, works, self._file_lock))
                for (_, done, _), (ok, value) in zip(group, outcomes):
                    if done.cancelled():
                        continue
                    if ok:
                        done.set_result(value)
                    else:
                        done.set_exception(value)
                group = []
        except BaseException as error:
            # The committer itself failed (cancelled at shutdown, most likely): so do the writes it
            # held, the group under way included (whether it committed is not known here).
            failure = error if isinstance(error, Exception) else RuntimeError("the SQLite writer stopped before confirming this write")
            for _, done, _ in [*group, *self._queued]:
                if not done.done():
                    done.set_exception(failure)
            self._queued = []
            raise
        finally:
            self._committer = None

    async def ping(self, timeout_s: float = PING_TIMEOUT_S) -> str | None:
        """None if the database answers a trivial query within `timeout_s`, else why not (for the
        health route). One ping at a time: a health check polled faster than an unreachable
        database answers joins the ping under way rather than opening another connection."""
        if self._ping is None or self._ping.done():
            self._ping = asyncio.ensure_future(self.read_with(_select_one, small=True))
            self._ping.add_done_callback(_retrieved)
        done, _ = await asyncio.wait({self._ping}, timeout=timeout_s)
        if not done:
            return f"no answer within {timeout_s:g} s"
        error = self._ping.exception()
        if error is None:
            return None
        return outage(error) or f"the check query failed ({type(error).__name__})"

    def _start_checkpoints(self) -> None:
        if self._checkpointer is None and self._sqlite_path is not None:
            self._checkpointer = Checkpointer(self._sqlite_path)

    async def read_with(self, work: Callable[[sa.Connection], T], *, small: bool = False) -> T:
        """Run `work(connection)` on a connection for reads.

        `small`: the read is a few indexed rows. On SQLite it is then made on the event loop itself
        rather than on a reading thread, whose hop there and back cost more than such a read (a
        reader in WAL mode never waits for a writer)."""
        if (tracing := store_tracing()) is not None:
            return await tracing.store("read", self.dialect, self.read_with(work, small=small))
        try:
            return await self._read_with(work, small)
        except Exception as error:
            if (down := unavailable(error, f"a read from {self.dialect}")) is None:
                raise
            raise down from error

    async def _read_with(self, work: Callable[[sa.Connection], T], small: bool) -> T:
        if self._pg is not None:
            return await self._pg.run(autocommitted_read, work)
        if self._sync is None or self._read_threads is None:
            async with self.engine.connect() as conn:
                return await conn.run_sync(work)
        if small and self._reading is not None:
            return self._reading.read(work)
        return await asyncio.get_running_loop().run_in_executor(self._read_threads, self._read_on_thread, work)

    def _read_on_thread(self, work: Callable[[sa.Connection], T]) -> T:
        assert self._sync is not None
        # list.pop and list.append are atomic: no two threads take the same connection.
        reading = self._idle_readers.pop() if self._idle_readers else Held(self._sync)
        try:
            return reading.read(work)
        finally:
            self._idle_readers.append(reading)

    def read(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A pooled connection for reads; its transaction is rolled back when it is returned."""
        return self.engine.connect()

    def transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection in a write transaction: committed on success, rolled back on error."""
        if self._write_lock is None:
            return self.engine.begin()
        return self._sqlite_transaction(self._write_lock)

    @asynccontextmanager
    async def _sqlite_transaction(self, lock: asyncio.Lock) -> AsyncIterator[AsyncConnection]:
        task = asyncio.current_task()
        if task is not None and self._writer is task:
            raise RuntimeError("nested write transaction on the same SQLite database")
        self._start_checkpoints()
        # The connection is taken only once the lock is held, so writers queued on the lock
        # hold no pool slots and cannot starve the readers (or each other) of connections.
        async with lock:
            self._writer = task
            try:
                async with self.engine.connect() as conn:
                    # IMMEDIATE takes the write lock up front: a deferred transaction that reads
                    # before writing can fail to upgrade its lock without waiting busy_timeout.
                    await conn.execution_options(**{BEGIN_OPTION: "BEGIN IMMEDIATE"})
                    async with conn.begin():
                        yield conn
            finally:
                self._writer = None

    async def read_one(self, statement: Sql, params: Mapping[str, Any] | None = None, *, small: bool = True) -> tuple[Any, ...] | None:
        """The first row a statement returns, or None. It is taken to be a lookup by key, a `small`
        read (`read_with`); a query that must scan passes `small=False`."""
        return await self.read_with(lambda connection: statement.run(connection, params).first(), small=small)

    async def read_all(self, statement: Sql, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """The rows a statement returns."""
        return await self.read_with(lambda connection: statement.run(connection, params).rows)

    async def write_one(self, statement: Sql, params: Mapping[str, Any] | None = None) -> int:
        """Run one statement in a transaction of its own (on PostgreSQL, in autocommit: one
        statement is atomic by itself); the number of rows it matched."""
        return await self.write(lambda connection: statement.run(connection, params).rowcount, one_statement=True)

    async def fetch_all(self, stmt: sa.Executable, params: dict[str, Any] | None = None) -> list[sa.RowMapping]:
        """The rows of a query (with values for its bind parameters), as mappings."""
        return await self.read_with(lambda conn: list(conn.execute(stmt, params).mappings().all()))

    async def fetch_one(self, stmt: sa.Executable, params: dict[str, Any] | None = None, *, small: bool = True) -> sa.RowMapping | None:
        """The first row of a query (with values for its bind parameters), or None. It is taken to be
        a lookup by key, a `small` read (`read_with`); a query that must scan passes `small=False`."""
        return await self.read_with(lambda conn: conn.execute(stmt, params).mappings().first(), small=small)

    async def execute(self, stmt: sa.Executable, params: dict[str, Any] | None = None) -> int:
        """Run one statement in a transaction of its own; the number of rows it matched. (On
        PostgreSQL, in autocommit: one statement is atomic by itself.)"""
        return await self.write(lambda conn: _rowcount(conn.execute(stmt, params)), one_statement=True)

    async def upsert(self, table: sa.Table | Table, values: dict[str, Any], key: Sequence[str]) -> None:
        """Insert a row, or update the row whose `key` columns (a unique index) already match."""
        if not key or any(name not in values for name in key):
            raise ValueError(f"upsert key {list(key)} must be non-empty and among the values")
        if isinstance(table, Table):
            await self.write_one(upsert_sql(table, tuple(values), tuple(key)), values)
            return
        update = [name for name in values if name not in key]
        # Both dialects' INSERTs take ON CONFLICT alike; each is imported only on its own database.
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        adding = insert(table).values(values)
        stmt = (adding.on_conflict_do_update(index_elements=list(key), set_={name: adding.excluded[name] for name in update})
                if update else adding.on_conflict_do_nothing(index_elements=list(key)))
        await self.execute(stmt)

    # --- signals between processes ----------------------------------------------------------

    async def subscribe(self, channel: str, callback: Callable[[str], None]) -> None:
        """Call `callback(payload)` for each `notify(channel, payload)` from every process: by
        LISTEN/NOTIFY on PostgreSQL, by Unix datagram sockets on an SQLite file (runtime.signals:
        the processes of one machine). A signal may be lost (a process busy past its buffer): it
        is a hint to act now on what the store will say anyway."""
        self._subscribers.setdefault(channel, []).append(callback)
        if self._listener is not None:
            await self._listener.listen(channel)
        elif self._machine is not None:
            self._machine.start()

    async def notify(self, channel: str, payload: str) -> None:
        """Tell the subscribers of `channel`, in every process that listens (see `subscribe`)."""
        if self._listener is not None:
            await self.write(lambda connection: NOTIFY.run(connection, {"channel": channel, "payload": payload}), one_statement=True)
        else:
            asyncio.get_running_loop().call_soon(self._deliver, channel, payload)
            if self._machine is not None:
                self._machine.send(channel, payload)

    def _deliver(self, channel: str, payload: str) -> None:
        for callback in self._subscribers.get(channel, ()):
            try:
                callback(payload)
            except Exception:
                log.exception("a subscriber of %s failed", channel)

    async def close(self) -> None:
        """Close every pooled connection, once the queued writes are done. The Database can
        still be used; it reconnects."""
        if self._listener is not None:
            await self._listener.close()
        if self._machine is not None:
            self._machine.close()
        if self._committer is not None:
            await asyncio.wait([self._committer])
        if self._checkpointer is not None:
            checkpointer, self._checkpointer = self._checkpointer, None
            await asyncio.get_running_loop().run_in_executor(None, checkpointer.stop)
        if self._pg is not None:
            await self._pg.close()
        if self._engine is not None:
            if self._pg is None:
                await self._engine.dispose()
            else:
                # The pool closes each connection politely, which on a network that stopped carrying
                # them waits for an answer that never comes: the close would never end (a shutdown
                # stuck until it is killed). Past DISPOSE_S the rest are left to end with the process.
                try:
                    await asyncio.wait_for(self._engine.dispose(), DISPOSE_S)
                except TimeoutError:
                    log.warning("closing the database's pooled connections took over %.0f s: left to end with the process", DISPOSE_S)
        if self._write_lock is not None and self._writing is not None:
            async with self._write_lock:  # a write on the writer thread holds it
                self._writing.close()
        if self._reading is not None:
            self._reading.close()
        for reading in list(self._idle_readers):  # (one in use by a read now is closed by the next close)
            reading.close()
        if self._sync is not None:
            self._sync.dispose()


def schema_lock(conn: sa.Connection) -> None:
    """Hold, until `conn`'s transaction ends, the lock under which the schema changes (on
    PostgreSQL): replicas starting together on a fresh database would otherwise race to create
    the same tables, types, extensions and indexes, and all but one would fail to start."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})


PARTIAL_INDEX_WHERE = "stack_partial_where"
"""Key of `sa.Index(..., info={PARTIAL_INDEX_WHERE: "<SQL>"})`: a partial index, on SQLite and
PostgreSQL alike. Given to the dialect when the tables are made, rather than as `sqlite_where=` and
`postgresql_where=`, which import each dialect named (PostgreSQL's: 22 ms at start-up) to check it."""


def _create_or_extend(conn: sa.Connection, metadata: sa.MetaData) -> None:
    """`create_all`, plus the additive migrations a newer release declares: a column added to
    a table is added to a database made by an older release (it must be nullable, so the rows
    already there stay valid), and its indexes are made. Nothing is ever dropped or rewritten."""
    schema_lock(conn)
    for table in metadata.sorted_tables:
        for index in table.indexes:
            if (where := index.info.get(PARTIAL_INDEX_WHERE)) is not None:
                index.dialect_options[conn.dialect.name]["where"] = sa.text(where)
    inspector = sa.inspect(conn)
    existing = {table.name for table in metadata.sorted_tables if inspector.has_table(table.name, schema=table.schema)}
    metadata.create_all(conn, checkfirst=True)
    for table in metadata.sorted_tables:
        if table.name not in existing:
            continue
        present = {column["name"] for column in inspector.get_columns(table.name, schema=table.schema)}
        added = [column for column in table.columns if column.name not in present]
        for column in added:
            if not column.nullable:
                raise RuntimeError(f"table {table.name}: cannot add the NOT NULL column {column.name} to existing rows")
            kind = column.type.compile(dialect=conn.dialect)
            name = conn.dialect.identifier_preparer.format_column(column)
            conn.exec_driver_sql(f"ALTER TABLE {conn.dialect.identifier_preparer.format_table(table)} ADD COLUMN {name} {kind}")
        for index in table.indexes:
            index.create(conn, checkfirst=True)


def _make_declared(conn: sa.Connection, tables: Sequence[Table]) -> None:
    """The declared tables made, or extended by the columns and indexes declared since (see
    `_create_or_extend`)."""
    schema_lock(conn)
    dialect = conn.dialect.name
    for declared in tables:
        present = Sql(columns_present_sql(dialect)).run(conn, {"name": declared.name}).rows
        if not present:
            conn.exec_driver_sql(create_table_sql(declared, dialect))
        for column in missing_columns(declared, [name for name, in present]) if present else ():
            conn.exec_driver_sql(add_column_sql(declared, column, dialect))
        for index in declared.all_indexes():
            conn.exec_driver_sql(create_index_sql(declared, index))


def _rowcount(result: sa.CursorResult[Any]) -> int:
    return result.rowcount


def _select_one(connection: sa.Connection) -> None:
    connection.exec_driver_sql("SELECT 1").all()


def _retrieved(task: asyncio.Task[Any]) -> None:
    # A ping that outlived its health check still ends here, its outcome read (so asyncio never
    # logs it as an exception nobody retrieved).
    if not task.cancelled():
        task.exception()


def open_database(backend: SqliteBackend | PostgresBackend) -> Database:
    """A Database for one configured backend. Nothing is connected until first use."""
    if isinstance(backend, SqliteBackend):
        path = backend.path.expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        # URL.create rather than string formatting: a path may hold '?', '#' or '%'.
        url = sa.URL.create("sqlite+aiosqlite", database=str(path))
        # Pooled connections serve concurrent readers; the writer takes at most one of them.
        sync = sa.create_engine(
            sa.URL.create("sqlite+pysqlite", database=str(path)),
            pool_size=6, max_overflow=10, pool_timeout=30,
            connect_args={"check_same_thread": False},  # pooled connections move between our threads
            module=sqlite3,
            **JSON_CODEC,
        )
        hook_sqlite(sync)

        def make_async() -> AsyncEngine:
            from sqlalchemy.ext.asyncio import create_async_engine

            engine = create_async_engine(url, pool_size=5, max_overflow=15, pool_timeout=30, module=async_sqlite_dbapi(str(path)),
                                         **JSON_CODEC)
            hook_sqlite(engine.sync_engine)
            return engine

        return Database("sqlite", make_async, sync, sqlite_path=path)
    pg_url = sa.make_url(backend.dsn)
    if pg_url.drivername not in POSTGRES_SCHEMES:
        # The DSN may carry a password: name only its scheme.
        raise ValueError(f"not a PostgreSQL DSN (scheme {pg_url.drivername!r})")
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(
        pg_url.set(drivername="postgresql+asyncpg"),
        pool_size=backend.pool_size,
        max_overflow=0,  # pool_size is the bound the operator asked for
        connect_args={"timeout": backend.connect_timeout_s, "command_timeout": backend.command_timeout_s},
        **POSTGRES_JSON_CODEC,
    )
    sa.event.listen(engine.sync_engine, "checkout", closed_by_server)
    sa.event.listen(engine.sync_engine, "handle_error", drop_at_once)

    def make_schema_engine() -> AsyncEngine:
        # The schema's creation is not bound by command_timeout_s: an index built on a large table,
        # or the wait for another replica's, may take longer than any request's statement. A
        # connection for the call, closed after it (NullPool): nothing kept open for it.
        return create_async_engine(pg_url.set(drivername="postgresql+asyncpg"), poolclass=sa.NullPool,
                                   connect_args={"timeout": backend.connect_timeout_s}, **POSTGRES_JSON_CODEC)

    return Database("postgresql", lambda: engine, keep_pg=backend.pool_size // 2, listen_dsn=pg_url.set(drivername="postgresql").render_as_string(hide_password=False),
                    connect_timeout_s=backend.connect_timeout_s, make_schema_engine=make_schema_engine if backend.command_timeout_s else None)


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
