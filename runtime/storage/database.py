"""`Database`, one storage backend (SQLite or PostgreSQL) behind one interface: its writes (grouped
into shared transactions on SQLite), its reads, its signals between processes, its health. Made
by `open_database` (runtime.storage.backends); the schema it is given is made and extended by
runtime.storage.migrations."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from runtime.storage.signals import MachineSignals
from runtime.storage.outage import outage, unavailable
from runtime.storage.migrations import make_tables, schema_lock
from runtime.storage.postgres import NOTIFY, PgListener, PgPool, autocommitted, connect, in_greenlet, in_transaction
from runtime.storage.schema import Table
from runtime.storage.sql import InsertRows, Sql, upsert_sql, with_defaults
from runtime.storage.sqlite import Busy, Checkpointer, FileLock, Held, write_group_sync, write_sync
from runtime.storage.tasks import to_the_end
from runtime.observability.tracing import store_tracing

T = TypeVar("T")

log = logging.getLogger("stack")

SMALL_WRITE_ROWS = 32  # rows up to which a write of a hot path is `small` (Database.write)
PING_TIMEOUT_S = 2.0  # how long the health route waits for a database's answer
READING_THREADS = 4


class Database:
    """One storage backend: an SQLite file, or a PostgreSQL database. Made by `open_database`.

    Statements run in a work function, `work(connection)`, synchronous, given to `write` (in a
    transaction) or `read_with`: on SQLite on a thread of its own or the event loop, on PostgreSQL
    in a greenlet whose statements wait on asyncpg (runtime.storage.postgres). `read_one`,
    `read_all` and `write_one` run one statement.
    """

    def __init__(self, dialect: str, *, sqlite_path: Path | None = None, pg: PgPool | None = None, listen_dsn: str | None = None) -> None:
        self.dialect = dialect
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database dialect {self.dialect!r}")
        self._subscribers: dict[str, list[Callable[[str], None]]] = {}
        self._listener = PgListener(listen_dsn, self._deliver, pg.connect_timeout_s) if listen_dsn is not None and pg is not None else None
        self._ping: asyncio.Task[None] | None = None
        self._pg = pg
        # SQLite has one database-wide write lock, and writers queued in-process are fair and cannot
        # time out on it. (PostgreSQL has row-level locking and needs no help.)
        self._write_lock = asyncio.Lock() if sqlite_path is not None else None
        self._queued: list[tuple[Callable[[Any], Any], asyncio.Future[Any], bool]] = []  # (work, its outcome, small)
        self._committer: asyncio.Task[None] | None = None
        # On SQLite, `write` and the reads run whole on a thread of their own: one hop per
        # transaction (and SQLite releases the GIL while it works). One connection each for the
        # writes (one at a time: the write lock), for the small reads made on the event loop, and
        # for each reading thread's reads.
        self._sqlite_path = sqlite_path
        self._writing = Held(sqlite_path) if sqlite_path is not None else None
        self._reading = Held(sqlite_path) if sqlite_path is not None else None
        self._idle_readers: list[Held] = []  # the reading threads', each taken by one read at a time
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="stack-sqlite-write") if sqlite_path is not None else None
        self._read_threads = ThreadPoolExecutor(READING_THREADS, thread_name_prefix="stack-sqlite-read") if sqlite_path is not None else None
        self._file_lock = FileLock(sqlite_path.with_name(sqlite_path.name + ".write-lock")) if sqlite_path is not None else None
        self._machine = MachineSignals(sqlite_path.with_name(sqlite_path.name + ".signals"), self._deliver) \
            if sqlite_path is not None else None
        self._checkpointer: Checkpointer | None = None

    @property
    def connections_in_use(self) -> int:
        """PostgreSQL connections taken by a use now (not those kept idle between uses)."""
        return self._pg.in_use if self._pg is not None else 0

    async def create_tables(self, tables: Sequence[Table]) -> None:
        """Create the tables that do not exist yet, and add to tables that do the columns (nullable
        ones only) and indexes declared since they were made."""
        await self.change_schema(lambda connection: make_tables(connection, tables))

    async def change_schema(self, work: Callable[[Any], T]) -> T:
        """`work(connection)` in a transaction under the schema's lock (`schema_lock`). On PostgreSQL,
        on a connection of its own, not bound by command_timeout_s: an index built on a large table,
        or the wait for another replica's, may take longer than any request's statement."""

        def locked(connection: Any) -> T:
            schema_lock(connection)
            return work(connection)

        if self._pg is None:
            return await self.write(locked)
        try:
            connection = await connect(self._pg.dsn, self._pg.connect_timeout_s, None)
        except Exception as error:
            if (down := unavailable(error, "the schema's creation")) is None:
                raise
            raise down from error
        try:
            return await in_greenlet(in_transaction, connection, locked)
        finally:
            connection.terminate()

    async def write(self, work: Callable[[Any], T], *, small: bool = False, one_statement: bool = False) -> T:
        """Run `work(connection)` in a write transaction, committed if it returns, rolled back
        if it raises. `work` is synchronous: it only executes statements.

        `small`: the write is a few rows, quick to make. On SQLite, small writes are made on the
        event loop itself when no other process is writing, rather than on the writer thread:
        the hop there and back costs more than they do.

        `one_statement`: `work` executes a single statement, atomic by itself. On PostgreSQL it
        is then run in autocommit, without the BEGIN and COMMIT round trips of a transaction
        around it.

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

    async def _write(self, work: Callable[[Any], T], small: bool, one_statement: bool) -> T:
        if self._pg is not None:
            if isinstance(work, InsertRows) and (alone := work.alone_on_postgres()) is not None:
                work, one_statement = cast(Callable[[Any], T], alone), True
            return await self._pg.run(autocommitted if one_statement else in_transaction, work)
        assert self._writing is not None and self._write_lock is not None and self._write_thread is not None
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
        group: list[tuple[Callable[[Any], Any], asyncio.Future[Any], bool]] = []
        try:
            while self._queued:
                async with self._write_lock:
                    group, self._queued = self._queued, []
                    group = [queued for queued in group if not queued[1].cancelled()]
                    if not group:
                        continue  # every write of it was cancelled while queued: no transaction to make
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

    async def read_with(self, work: Callable[[Any], T], *, small: bool = False, transaction: bool = False) -> T:
        """Run `work(connection)` on a connection for reads, in one snapshot on SQLite (on
        PostgreSQL each statement reads its own, under READ COMMITTED, without BEGIN and ROLLBACK
        round trips around them).

        `small`: the read is a few indexed rows. On SQLite it is then made on the event loop itself
        rather than on a reading thread, whose hop there and back cost more than such a read (a
        reader in WAL mode never waits for a writer).

        `transaction`: on PostgreSQL too, in one transaction: for a setting made with `SET LOCAL`,
        which lasts only as long as its transaction, to hold for the statements after it."""
        if (tracing := store_tracing()) is not None:
            return await tracing.store("read", self.dialect, self.read_with(work, small=small, transaction=transaction))
        try:
            return await self._read_with(work, small, transaction)
        except Exception as error:
            if (down := unavailable(error, f"a read from {self.dialect}")) is None:
                raise
            raise down from error

    async def _read_with(self, work: Callable[[Any], T], small: bool, transaction: bool = False) -> T:
        if self._pg is not None:
            return await self._pg.run(in_transaction if transaction else autocommitted, work)
        assert self._reading is not None and self._read_threads is not None
        if small:
            return self._reading.read(work)
        return await asyncio.get_running_loop().run_in_executor(self._read_threads, self._read_on_thread, work)

    def _read_on_thread(self, work: Callable[[Any], T]) -> T:
        assert self._sqlite_path is not None
        # list.pop and list.append are atomic: no two threads take the same connection.
        reading = self._idle_readers.pop() if self._idle_readers else Held(self._sqlite_path)
        try:
            return reading.read(work)
        finally:
            self._idle_readers.append(reading)

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

    async def upsert(self, table: Table, values: dict[str, Any], key: Sequence[str]) -> None:
        """Insert a row, or update the row whose `key` columns (a unique index) already match."""
        if not key or any(name not in values for name in key):
            raise ValueError(f"upsert key {list(key)} must be non-empty and among the values")
        row = with_defaults(table, [values])[0]  # an insert takes the defaults of the columns left out; an update keeps them
        await self.write_one(upsert_sql(table, tuple(row), tuple(key), tuple(values)), row)

    # --- signals between processes ----------------------------------------------------------

    async def subscribe(self, channel: str, callback: Callable[[str], None]) -> None:
        """Call `callback(payload)` for each `notify(channel, payload)` from every process: by
        LISTEN/NOTIFY on PostgreSQL, by Unix datagram sockets on an SQLite file (runtime.storage.signals:
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
        """Close every connection, once the queued writes are done. The Database can still be used;
        it reconnects."""
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
            self._pg.close()
        if self._write_lock is not None and self._writing is not None:
            async with self._write_lock:  # a write on the writer thread holds it
                self._writing.close()
        if self._reading is not None:
            self._reading.close()
        for reading in list(self._idle_readers):  # (one in use by a read now is closed by the next close)
            reading.close()


_SELECT_ONE = Sql("SELECT 1")


def _select_one(connection: Any) -> None:
    _SELECT_ONE.run(connection)


def _retrieved(task: asyncio.Task[Any]) -> None:
    # A ping that outlived its health check still ends here, its outcome read (so asyncio never
    # logs it as an exception nobody retrieved).
    if not task.cancelled():
        task.exception()
