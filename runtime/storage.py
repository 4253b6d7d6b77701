"""The async storage layer the services keep their records in.

One `Database` per configured backend: SQLite (the embedded default) or PostgreSQL through
asyncpg. Services declare their tables with SQLAlchemy Core (`json_type()` for JSON columns),
create them with `create_tables`, and go through `write()` / `read_with()` (a synchronous
function run in one transaction) or the one-statement helpers. `read()` / `transaction()` give
an async connection instead; on SQLite the async engine behind them (aiosqlite) is only built,
and `sqlalchemy.ext.asyncio` only imported, when they are first used, which keeps start-up lean.

SQLite allows one writer at a time. Left to itself, a pool of connections that each try to
write ends in "database is locked" and a wedged pool under load, so each SQLite `Database`
serializes its write transactions in-process and starts them with `BEGIN IMMEDIATE`; reads run
in parallel (WAL mode) on other pooled connections.

Writes to SQLite are group-committed: the `write()` calls that arrive while a transaction is
running go together into the next one, so under load many writes share one thread hop and one
commit (most of what a small write costs). A write is still atomic on its own: when one of the
group fails, the group is rolled back and each of its writes run again in a transaction of its
own, so only the failing one fails.

On PostgreSQL, `write()` and `read_with()` run their function on a connection kept checked out
between uses (up to half the pool), the whole transaction in one hop into SQLAlchemy's greenlet,
and to the end even if the caller is cancelled meanwhile. A connection the server has closed is
replaced when next used, where SQLAlchemy's pre-ping would ask the server on every use.

SQLite connections come from sqlean.py, a current SQLite (3.50) that loads extensions (this
Python's own `sqlite3`, like many distributions' builds, cannot), with sqlite-vec loaded on each:
the vector stores keep their vectors in its `vec0` tables, in the same file and transactions as
everything else.

WAL frames are copied back into the database file (a checkpoint) by a thread of each SQLite
`Database`, every half second, instead of by whichever commit crosses SQLite's 1,000-page mark:
that copy and its fsync took several milliseconds and landed on one request in sixty. The
automatic checkpoint stays on, further out, as a backstop.

Several processes may write one SQLite file (`stack run --workers N`). SQLite makes a writer that
finds another process's lock poll for it, sleeping up to 100 ms between tries, which left the
processes idle much of the time; each write transaction therefore first takes an advisory lock on
a file beside the database (`flock`, released at commit), which the kernel hands to the next
process the moment it is free. Alone, a process takes it uncontended: two system calls a group.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import importlib.util
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

import sqlalchemy as sa
import sqlean as sqlite3  # type: ignore[import-untyped]
from sqlalchemy.util import await_only

from builder.config import STORE_NAMES, PostgresBackend, SqliteBackend, StorageConfig
from runtime import fastjson
from runtime.auth import granted_owners
from runtime.signals import MachineSignals
from runtime.tracing import store_tracing

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["PARTIAL_INDEX_WHERE", "SMALL_WRITE_ROWS", "Database", "InsertRows", "Prepared", "Ran", "Storage", "caller_may", "for_caller", "insert_into", "json_type", "open_database", "rows_of_json", "schema_lock"]

# Execution option read by the SQLite "begin" hook: which BEGIN to emit for this connection.
_BEGIN_OPTION = "stack_sqlite_begin"

_POSTGRES_SCHEMES = frozenset({"postgres", "postgresql", "postgresql+asyncpg"})


T = TypeVar("T")

log = logging.getLogger("stack")

_SCHEMA_LOCK = 0x57AC4  # the advisory lock key under which tables are made or extended
CHECKPOINT_EVERY_S = 0.5
SMALL_WRITE_ROWS = 32  # rows up to which a write of a hot path is `small` (Database.write)
AUTOCHECKPOINT_PAGES = 16_384  # 64 MiB of WAL: reached only if the checkpoint thread falls behind


def caller_may(action: str, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """The condition that the caller may `action` (read, update, delete) a row whose owner is in
    `column` (runtime.auth): its own rows, those the access policy grants, every row with auth
    off and for the server's own work outside a request."""
    owners = granted_owners(action)
    if owners is None:
        return sa.true()
    return column == next(iter(owners)) if len(owners) == 1 else column.in_(sorted(owners))


def for_caller(plain: Any, owned: Any, column: sa.ColumnElement[Any], params: dict[str, Any], action: str = "read",
               bind: str = "caller") -> tuple[Any, dict[str, Any]]:
    """A prebuilt statement (or `Prepared` one) and its parameters for the caller to `action` rows whose owner is in
    `column` (`caller_may` for statements built once, on hot paths): `plain` with auth off, `owned`
    (filtered by owner = `:bind`) for the caller's own, else `plain` filtered by the owners the
    access policy grants."""
    owners = granted_owners(action)
    if owners is None:
        return plain, params
    if len(owners) == 1:
        return owned, {**params, bind: next(iter(owners))}
    if isinstance(plain, Prepared):
        return Prepared(cast(Any, plain.statement).where(column.in_(sorted(owners))), on_driver=False), params
    return plain.where(column.in_(sorted(owners))), params


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


class Database:
    """One storage backend behind an SQLAlchemy async engine.

    Made by `open_database`, which also installs the SQLite connection hooks this class relies
    on. `read()` is for reads only; every write goes through `transaction()` (or `execute` /
    `upsert`), since on SQLite that is what holds the write lock. Write transactions on the same
    SQLite database must not be nested in one task: the inner one would wait for the outer one
    forever, so it raises `RuntimeError` instead.
    """

    def __init__(self, dialect: str, make_engine: Callable[[], AsyncEngine], sqlite_sync: sa.Engine | None = None,
                 sqlite_path: Path | None = None, listen_dsn: str | None = None, keep_pg: int = 0) -> None:
        self._engine: AsyncEngine | None = None
        self._subscribers: dict[str, list[Callable[[str], None]]] = {}
        self._listener = _PgListener(listen_dsn, self._deliver) if listen_dsn is not None else None
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
        # reads made on the event loop, kept out of the pool between uses (see _Held).
        self._writing = _Held(sqlite_sync, **{_BEGIN_OPTION: "BEGIN IMMEDIATE"}) if sqlite_sync is not None else None
        self._reading = _Held(sqlite_sync) if sqlite_sync is not None else None
        self._idle_readers: list[_Held] = []  # the reading threads', each taken by one read at a time
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="stack-sqlite-write") if sqlite_sync else None
        self._read_threads = ThreadPoolExecutor(4, thread_name_prefix="stack-sqlite-read") if sqlite_sync else None
        self._sqlite_path = sqlite_path
        self._file_lock = _FileLock(sqlite_path.with_name(sqlite_path.name + ".write-lock")) if sqlite_path is not None else None
        self._machine = MachineSignals(sqlite_path.with_name(sqlite_path.name + ".signals"), self._deliver) \
            if sqlite_path is not None else None
        self._system = "sqlite" if sqlite_path is not None else "postgresql"
        self._checkpointer: _Checkpointer | None = None
        # On PostgreSQL, `write` and `read_with` keep up to half the pool's connections checked out
        # between uses (see _PgConnections).
        self._pg = _PgConnections(self.engine, keep_pg) if self.dialect == "postgresql" else None

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

    async def create_tables(self, metadata: sa.MetaData) -> None:
        """Create the tables of `metadata` that do not exist yet, and add to tables that do the
        columns (nullable ones only) and indexes declared since they were made."""
        await self.write(lambda conn: _create_or_extend(conn, metadata))

    async def write(self, work: Callable[[sa.Connection], T], *, small: bool = False, one_statement: bool = False) -> T:
        """Run `work(connection)` in a write transaction, committed if it returns, rolled back
        if it raises. `work` is synchronous: it only executes statements.

        `small`: the write is a few rows, quick to make. On SQLite, small writes are made on the
        event loop itself when no other process is writing, rather than on the writer thread:
        the hop there and back costs more than they do.

        `one_statement`: `work` executes a single statement, atomic by itself. On PostgreSQL it
        is then run in autocommit, without the BEGIN and COMMIT round trips of a transaction
        around it, and a `Prepared` one on asyncpg directly."""
        if (tracing := store_tracing()) is not None:
            return await tracing.store("write", self._system, self.write(work, small=small, one_statement=one_statement))
        if self._pg is not None:
            if isinstance(work, InsertRows) and (alone := work.alone_on_postgres()) is not None:
                work, one_statement = cast(Callable[[sa.Connection], T], alone), True
            step = _autocommitted_write if one_statement else _in_transaction
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
                return await _to_the_end(loop.run_in_executor(self._write_thread, _write_sync, self._writing, work, self._file_lock))
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
                    if self._file_lock is not None and all(small for _, _, small in group) and self._file_lock.acquire_now():
                        try:
                            outcomes = _write_group_sync(self._writing, works)
                        finally:
                            self._file_lock.release()
                    else:
                        outcomes = await _to_the_end(
                            loop.run_in_executor(self._write_thread, _write_group_sync, self._writing, works, self._file_lock))
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

    def _start_checkpoints(self) -> None:
        if self._checkpointer is None and self._sqlite_path is not None:
            self._checkpointer = _Checkpointer(self._sqlite_path)

    async def read_with(self, work: Callable[[sa.Connection], T], *, small: bool = False) -> T:
        """Run `work(connection)` on a connection for reads.

        `small`: the read is a few indexed rows. On SQLite it is then made on the event loop itself
        rather than on a reading thread, whose hop there and back cost more than such a read (a
        reader in WAL mode never waits for a writer)."""
        if (tracing := store_tracing()) is not None:
            return await tracing.store("read", self._system, self.read_with(work, small=small))
        if self._pg is not None:
            return await self._pg.run(_autocommitted_read, work)
        if self._sync is None or self._read_threads is None:
            async with self.engine.connect() as conn:
                return await conn.run_sync(work)
        if small and self._reading is not None:
            return self._reading.read(work)
        return await asyncio.get_running_loop().run_in_executor(self._read_threads, self._read_on_thread, work)

    def _read_on_thread(self, work: Callable[[sa.Connection], T]) -> T:
        assert self._sync is not None
        # list.pop and list.append are atomic: no two threads take the same connection.
        reading = self._idle_readers.pop() if self._idle_readers else _Held(self._sync)
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
                    await conn.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
                    async with conn.begin():
                        yield conn
            finally:
                self._writer = None

    async def fetch_all(self, stmt: sa.Executable, params: dict[str, Any] | None = None) -> list[sa.RowMapping]:
        """The rows of a query (with values for its bind parameters), as mappings."""
        return await self.read_with(lambda conn: list(conn.execute(stmt, params).mappings().all()))

    async def fetch_one(self, stmt: sa.Executable, params: dict[str, Any] | None = None) -> sa.RowMapping | None:
        """The first row of a query (with values for its bind parameters), or None."""
        return await self.read_with(lambda conn: conn.execute(stmt, params).mappings().first())

    async def execute(self, stmt: sa.Executable, params: dict[str, Any] | None = None) -> int:
        """Run one statement in a transaction of its own; the number of rows it matched. (On
        PostgreSQL, in autocommit: one statement is atomic by itself.)"""
        return await self.write(lambda conn: _rowcount(conn.execute(stmt, params)), one_statement=True)

    async def upsert(self, table: sa.Table, values: dict[str, Any], key: Sequence[str]) -> None:
        """Insert a row, or update the row whose `key` columns (a unique index) already match."""
        if not key or any(name not in values for name in key):
            raise ValueError(f"upsert key {list(key)} must be non-empty and among the values")
        update = [name for name in values if name not in key]
        stmt: sa.Executable
        if self.dialect == "postgresql":
            from sqlalchemy.dialects import postgresql

            pg = postgresql.insert(table).values(values)
            stmt = (
                pg.on_conflict_do_update(
                    index_elements=list(key), set_={n: pg.excluded[n] for n in update}
                )
                if update
                else pg.on_conflict_do_nothing(index_elements=list(key))
            )
        else:
            from sqlalchemy.dialects import sqlite

            lite = sqlite.insert(table).values(values)
            stmt = (
                lite.on_conflict_do_update(
                    index_elements=list(key), set_={n: lite.excluded[n] for n in update}
                )
                if update
                else lite.on_conflict_do_nothing(index_elements=list(key))
            )
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
            await self.write(lambda connection: _NOTIFY.run(connection, {"channel": channel, "payload": payload}), one_statement=True)
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
            await self._engine.dispose()
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


def _rowcount(result: sa.CursorResult[Any]) -> int:
    return result.rowcount


class _FileLock:
    """An exclusive advisory lock (flock) on a file, across processes. In a process, it is taken
    by the database's writer thread, or by the event loop while the writer has nothing to do (the
    in-process write lock decides which), so it needs no lock of its own in the process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def __enter__(self) -> None:
        fcntl.flock(self._file(), fcntl.LOCK_EX)

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def acquire_now(self) -> bool:
        """Take the lock if no other process holds it; False, without waiting, if one does."""
        try:
            fcntl.flock(self._file(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)


async def _to_the_end(future: asyncio.Future[T]) -> T:
    """A write's outcome from the writer thread. Cancelled meanwhile, it still waits for the thread
    to be done before it raises, and so before the write lock is let go: until then the writing
    connection is the thread's, and the next write, on the event loop perhaps, must not use it."""
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        raise cancelled
    return future.result()


class _Held:
    """One of the pool's connections, kept checked out for one use (the writes, or the small reads
    made on the event loop) by one thread at a time, which the caller sees to. Taking a connection
    from the pool and giving it back (the pool's bookkeeping, its events, the reset on return)
    cost 40 to 70 µs a transaction here: more than a small write's own statements and commit
    (about 30 µs). After an error the connection goes back to the pool, which resets it or
    discards it, and the next use takes another: one in a state not known is never used again."""

    __slots__ = ("_engine", "_options", "_connection")

    def __init__(self, engine: sa.Engine, **options: Any) -> None:
        self._engine = engine
        self._options = options
        self._connection: sa.Connection | None = None

    def _get(self) -> sa.Connection:
        if self._connection is None:
            connection = self._engine.connect()
            self._connection = connection.execution_options(**self._options) if self._options else connection
        return self._connection

    def write(self, work: Callable[[sa.Connection], T]) -> T:
        """`work(connection)` in a transaction: committed if it returns, rolled back if it raises."""
        connection = self._get()
        try:
            with connection.begin():
                return work(connection)
        except BaseException:
            self.close()
            raise

    def read(self, work: Callable[[sa.Connection], T]) -> T:
        """`work(connection)`, whose transaction (the snapshot it read) is ended after it."""
        connection = self._get()
        try:
            result = work(connection)
            connection.rollback()
        except BaseException:
            self.close()
            raise
        return result

    def close(self) -> None:
        """Give the connection back to the pool; the next use takes one again."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _write_sync(writing: _Held, work: Callable[[sa.Connection], T], lock: _FileLock | None = None) -> T:
    with lock if lock is not None else contextlib.nullcontext():
        return writing.write(work)


Outcome = tuple[bool, Any]  # (True, result) or (False, the exception raised)


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

    def __init__(self, *inserts: tuple[sa.Table, Sequence[dict[str, Any]]]) -> None:
        self.inserts = [(table, rows) for table, rows in inserts if rows]

    def __call__(self, connection: sa.Connection) -> None:
        for table, rows in self.inserts:
            insert_into(table).run(connection, list(rows))

    def alone_on_postgres(self) -> Callable[[sa.Connection], None] | None:
        """The inserts as one PostgreSQL statement: each table's rows sent as one JSON array and
        read back into typed rows by `jsonb_to_recordset`, the tables but the last inserted from
        data-modifying WITHs. None where that would not insert what separate inserts would: a
        column of a type JSON does not carry as such (only strings, numbers, booleans and JSON
        columns do), rows with different columns, or a column left to a default computed in Python."""
        shapes: list[tuple[sa.Table, tuple[str, ...]]] = []
        params: dict[str, Any] = {}
        for index, (table, rows) in enumerate(self.inserts):
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


class Ran(NamedTuple):
    """What a `Prepared` statement did: the rows it returned (RETURNING) and the rows it matched."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def scalar(self) -> Any:
        """The first column of the first row returned, or None."""
        return self.rows[0][0] if self.rows else None


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


# `Database.notify` on PostgreSQL: a statement built once, run on asyncpg in autocommit, where a text
# statement built per call cost SQLAlchemy's compile-cache lookup and execution layer each time.
_NOTIFY = Prepared(sa.select(sa.func.pg_notify(sa.bindparam("channel", type_=sa.String), sa.bindparam("payload", type_=sa.String))))


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


def _run_group(conn: sa.Connection, works: list[Callable[[sa.Connection], Any]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    at = 0
    while at < len(works):
        work = works[at]
        if not isinstance(work, InsertRows):
            outcomes.append((True, work(conn)))
            at += 1
            continue
        merged: dict[sa.Table, list[dict[str, Any]]] = {}
        while at < len(works) and isinstance(insert := works[at], InsertRows):  # a run of inserts: one statement a table
            for table, rows in insert.inserts:
                merged.setdefault(table, []).extend(rows)
            outcomes.append((True, None))
            at += 1
        for table, rows in merged.items():
            insert_into(table).run(conn, rows)
    return outcomes


def _write_group_sync(writing: _Held, works: list[Callable[[sa.Connection], Any]], lock: _FileLock | None = None) -> list[Outcome]:
    """Run `works` in one transaction; if any of them fails, run each in a transaction of its
    own instead, so a write's failure is its own."""
    if len(works) > 1:
        try:
            with lock if lock is not None else contextlib.nullcontext():
                return writing.write(lambda conn: _run_group(conn, works))
        except Exception:
            pass  # rolled back whole: retried one by one below
    outcomes: list[Outcome] = []
    for work in works:
        try:
            outcomes.append((True, _write_sync(writing, work, lock)))
        except Exception as error:
            outcomes.append((False, error))
    return outcomes


class _Checkpointer:
    """A thread that checkpoints one SQLite database's WAL every CHECKPOINT_EVERY_S seconds,
    on a connection of its own. PASSIVE: it never waits for, nor blocks, readers and writers."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        connection = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            while not self._stopping.wait(CHECKPOINT_EVERY_S):
                try:
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as error:  # a busy database, a vanished file: the next round tries again
                    log.debug("checkpoint of %s: %s", self._path, error)
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as error:
            log.debug("checkpoint of %s: %s", self._path, error)
        finally:
            connection.close()

    def stop(self) -> None:
        """Checkpoint once more, then end the thread."""
        self._stopping.set()
        self._thread.join(timeout=10)


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take BEGIN away from the driver so the "begin" hook decides which kind to emit.
    dbapi_connection.isolation_level = None
    raw = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    if isinstance(raw, sqlite3.Connection):  # (the async engine's connections get it from their creator)
        _load_vec(raw)
    cursor = dbapi_connection.cursor()
    try:
        for pragma in (
            "journal_mode=WAL",  # readers do not block the writer, nor it them
            "synchronous=NORMAL",  # durable at checkpoints; safe against corruption in WAL
            "busy_timeout=5000",  # wait for other processes' locks rather than fail at once
            "foreign_keys=ON",
            f"wal_autocheckpoint={AUTOCHECKPOINT_PAGES}",  # the checkpoint thread does it (see the module's doc)
        ):
            cursor.execute(f"PRAGMA {pragma}")
    finally:
        cursor.close()


@functools.cache
def _vec_path() -> str:
    # The extension's file, found without importing its package (which imports NumPy: 16 MiB and 55 ms at start).
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the sqlite-vec package is not installed (pip install sqlite-vec)")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")


def _load_vec(connection: Any) -> None:
    connection.enable_load_extension(True)
    try:
        connection.load_extension(_vec_path())
    finally:
        connection.enable_load_extension(False)


def _sqlite_connect(path: str) -> Any:
    connection = sqlite3.connect(path, check_same_thread=False)
    _load_vec(connection)
    return connection


def _async_sqlite_dbapi(path: str) -> Any:
    """SQLAlchemy's aiosqlite adapter over sqlean: aiosqlite's connections, run on sqlean's."""
    import types

    import aiosqlite
    from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_dbapi

    def connect(*_args: Any, **_kwargs: Any) -> aiosqlite.Connection:
        return aiosqlite.Connection(lambda: _sqlite_connect(path), 64)

    shim = types.SimpleNamespace(
        Connection=aiosqlite.Connection, connect=connect,
        **{name: getattr(sqlite3, name) for name in ("DatabaseError", "Error", "IntegrityError", "NotSupportedError",
                                                      "OperationalError", "ProgrammingError", "sqlite_version", "sqlite_version_info")})
    return AsyncAdapt_aiosqlite_dbapi(shim, sqlite3)  # type: ignore[arg-type]


def _hook_sqlite(engine: sa.Engine) -> None:
    sa.event.listen(engine, "connect", _sqlite_on_connect)
    sa.event.listen(engine, "begin", _sqlite_on_begin)


def _sqlite_on_begin(conn: sa.Connection) -> None:
    begin = conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN")
    driver = conn.connection.driver_connection
    if not isinstance(driver, sqlite3.Connection):  # the async engine's (aiosqlite)
        conn.exec_driver_sql(begin)
        return
    # On the driver itself: through SQLAlchemy's execution layer it was 6 of a small write's 30 µs.
    try:
        driver.execute(begin)
    except sqlite3.DatabaseError as error:  # as SQLAlchemy would raise it ("database is locked")
        raise sa.exc.DBAPIError.instance(begin, None, error, sqlite3.Error) from error


def _json_text(value: Any) -> str:
    return fastjson.dumps(value).decode()


# JSON columns are (de)serialised with the fast codec: a stored response is a large document.
_JSON_CODEC: dict[str, Any] = {"json_serializer": _json_text, "json_deserializer": fastjson.loads}


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
            **_JSON_CODEC,
        )
        _hook_sqlite(sync)

        def make_async() -> AsyncEngine:
            from sqlalchemy.ext.asyncio import create_async_engine

            engine = create_async_engine(url, pool_size=5, max_overflow=15, pool_timeout=30, module=_async_sqlite_dbapi(str(path)),
                                         **_JSON_CODEC)
            _hook_sqlite(engine.sync_engine)
            return engine

        return Database("sqlite", make_async, sync, sqlite_path=path)
    pg_url = sa.make_url(backend.dsn)
    if pg_url.drivername not in _POSTGRES_SCHEMES:
        # The DSN may carry a password: name only its scheme.
        raise ValueError(f"not a PostgreSQL DSN (scheme {pg_url.drivername!r})")
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(
        pg_url.set(drivername="postgresql+asyncpg"),
        pool_size=backend.pool_size,
        max_overflow=0,  # pool_size is the bound the operator asked for
        **_JSON_CODEC,
    )
    sa.event.listen(engine.sync_engine, "checkout", _closed_by_server)
    return Database("postgresql", lambda: engine, keep_pg=backend.pool_size // 2, listen_dsn=pg_url.set(drivername="postgresql").render_as_string(hide_password=False))


def _closed_by_server(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """The pool's check before it hands out a connection: one the server has closed (a restart, an
    idle timeout, `pg_terminate_backend`) is dropped and another made. asyncpg marks a connection
    closed as soon as the event loop sees the server close it. SQLAlchemy's `pool_pre_ping` asks
    the server instead: three round trips (BEGIN, an empty query, ROLLBACK) on every checkout."""
    if _closed(dbapi_connection.driver_connection):
        raise sa.exc.DisconnectionError("the server closed this connection")


def _closed(driver_connection: Any) -> bool:
    return driver_connection is None or bool(driver_connection.is_closed())


def _in_transaction(connection: sa.Connection, work: Callable[[sa.Connection], T]) -> T:
    with connection.begin():
        return work(connection)


def _autocommitted_read(connection: sa.Connection, work: Callable[[sa.Connection], T]) -> T:
    """`work` with each statement a transaction of its own: what it reads under PostgreSQL's
    default isolation (READ COMMITTED) is the same as in one transaction, a snapshot per
    statement, without BEGIN and ROLLBACK round trips around it."""
    with _autocommit(connection):
        try:
            return work(connection)
        finally:
            connection.rollback()  # SQLAlchemy's own bookkeeping: no round trip in autocommit


def _autocommitted_write(connection: sa.Connection, work: Callable[[sa.Connection], T]) -> T:
    with _autocommit(connection):
        try:
            result = work(connection)
        except BaseException:
            connection.rollback()
            raise
        connection.commit()
        return result


@contextlib.contextmanager
def _autocommit(connection: sa.Connection) -> Iterator[None]:
    # The DBAPI connection's own switch (asyncpg's adapter sends no BEGIN while it is on): no
    # round trip, where `execution_options(isolation_level=...)` would roll back and reset.
    dbapi_connection: Any = connection.connection.dbapi_connection
    dbapi_connection.autocommit = True
    try:
        yield
    finally:
        dbapi_connection.autocommit = False


class _PgConnections:
    """The PostgreSQL connections `write` and `read_with` use, up to `keep` of them kept checked
    out of the engine's pool while idle. Taking a connection from SQLAlchemy's async pool and
    giving it back cost 140 µs of CPU here, and beginning, running and committing a transaction in
    three hops into SQLAlchemy's greenlet (`engine.begin()`, `run_sync`) about 200 more: a one-row
    insert took 1.3 to 1.5 ms in process (0.8 ms of CPU) where asyncpg alone takes 0.6 to 0.75
    (0.3). With a kept connection and one hop a transaction it takes 0.9 (0.5).

    `keep` is at most half the pool, so that the connections kept idle here never leave the
    engine's other users waiting for ever. A connection that a use ended with an error goes back to
    the pool (which rolls it back, or drops it if it is broken); one the server has closed
    meanwhile is dropped when next taken."""

    def __init__(self, engine: AsyncEngine, keep: int) -> None:
        self._engine = engine
        self._keep = keep
        self.idle: list[AsyncConnection] = []

    async def run(self, step: Callable[[sa.Connection, Callable[[sa.Connection], T]], T], work: Callable[[sa.Connection], T]) -> T:
        """`step(connection, work)` in one hop into SQLAlchemy's greenlet, made to the end even if
        the caller is cancelled meanwhile (which is raised once it is made)."""
        return await _to_the_end(asyncio.ensure_future(self._run(step, work)))

    async def _run(self, step: Callable[[sa.Connection, Callable[[sa.Connection], T]], T], work: Callable[[sa.Connection], T]) -> T:
        connection = await self._take()
        try:
            result = await connection.run_sync(step, work)
        except BaseException:
            await connection.close()
            raise
        if len(self.idle) < self._keep:
            self.idle.append(connection)
        else:
            await connection.close()
        return result

    async def _take(self) -> AsyncConnection:
        while self.idle:
            connection = self.idle.pop()
            sync = connection.sync_connection
            if sync is not None and not sync.invalidated and not _closed(sync.connection.driver_connection):
                return connection
            await connection.invalidate()
        return await self._engine.connect()

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for connection in idle:
            await connection.close()


class _PgListener:
    """One asyncpg connection of this process that LISTENs on the channels subscribed to, made on
    the first subscription and made again (with every channel) if it is lost."""

    def __init__(self, dsn: str, deliver: Callable[[str, str], None]) -> None:
        self.dsn = dsn
        self.deliver = deliver
        self.channels: set[str] = set()
        self._connection: Any = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._reconnecting: asyncio.Task[None] | None = None

    async def listen(self, channel: str) -> None:
        async with self._lock:
            self._closed = False
            self.channels.add(channel)
            if self._connection is None or self._connection.is_closed():
                await self._connect()
            else:
                await self._connection.add_listener(channel, self._on_notification)

    async def _connect(self) -> None:
        import asyncpg

        connection = await asyncpg.connect(self.dsn, timeout=10)
        for channel in self.channels:
            await connection.add_listener(channel, self._on_notification)
        connection.add_termination_listener(self._on_lost)
        self._connection = connection

    def _on_notification(self, _connection: Any, _pid: int, channel: str, payload: str) -> None:
        self.deliver(channel, payload)

    def _on_lost(self, _connection: Any) -> None:
        if not self._closed and self._reconnecting is None:
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        delay = 0.5
        try:
            while not self._closed:
                try:
                    async with self._lock:
                        await self._connect()
                    return
                except Exception as error:  # the server restarting: try again, then less often
                    log.warning("listening for notifications again failed (%s); next try in %.0f s", error, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30)
        finally:
            self._reconnecting = None

    async def close(self) -> None:
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        if self._connection is not None and not self._connection.is_closed():
            await self._connection.close()
        self._connection = None


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

    async def close(self) -> None:
        """Close every opened backend."""
        databases, self._databases = list(self._databases.values()), {}
        for database in databases:
            await database.close()
