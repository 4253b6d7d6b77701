"""SQLite's side of the storage layer: the connections' set-up, the writer's held connection and
group commits, the checkpoint thread and the lock between processes.

SQLite allows one writer at a time. Left to itself, a pool of connections that each try to
write ends in "database is locked" and a wedged pool under load, so each SQLite `Database`
serializes its write transactions in-process and starts them with `BEGIN IMMEDIATE`; reads run
in parallel (WAL mode) on other pooled connections.

Writes to SQLite are group-committed: the `write()` calls that arrive while a transaction is
running go together into the next one, so under load many writes share one thread hop and one
commit (most of what a small write costs). A write is still atomic on its own: when one of the
group fails, the group is rolled back and each of its writes run again in a transaction of its
own, so only the failing one fails.

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

import contextlib
import fcntl
import functools
import importlib.util
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
import sqlean as sqlite3  # type: ignore[import-untyped]

from runtime.storage.schema import Table
from runtime.storage.statements import InsertRows, insert_rows

T = TypeVar("T")

log = logging.getLogger("stack")

# Execution option read by the SQLite "begin" hook: which BEGIN to emit for this connection.
BEGIN_OPTION = "stack_sqlite_begin"
BUSY_TIMEOUT_S = 5  # how long a write waits for another program's lock on the file before it fails
_SQLITE_BUSY = 5


class Busy(Exception):
    """SQLite's write lock is held by another program and the write was not to wait for it:
    nothing was written."""


CHECKPOINT_EVERY_S = 0.5


AUTOCHECKPOINT_PAGES = 16_384  # 64 MiB of WAL: reached only if the checkpoint thread falls behind


class FileLock:
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


class Held:
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

    def write(self, work: Callable[[sa.Connection], T], wait: bool = True) -> T:
        """`work(connection)` in a transaction: committed if it returns, rolled back if it raises.
        Not to `wait`: `Busy` at once, rather than SQLite's wait of up to BUSY_TIMEOUT_S, if
        another program holds the file's write lock (only the BEGIN takes it, in WAL mode)."""
        connection = self._get()
        try:
            with connection.begin() if wait else _begin_now(connection):
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


def _begin_now(connection: sa.Connection) -> sa.RootTransaction:
    driver: Any = connection.connection.driver_connection
    driver.set_busy_timeout(0)  # sqlean's own call: a C call, where a PRAGMA each way cost 2.9 µs
    try:
        return connection.begin()
    except sa.exc.DBAPIError as error:
        if getattr(error.orig, "sqlite_errorcode", 0) & 0xFF == _SQLITE_BUSY:
            raise Busy() from error
        raise
    finally:
        driver.set_busy_timeout(BUSY_TIMEOUT_S)


def write_sync(writing: Held, work: Callable[[sa.Connection], T], lock: FileLock | None = None) -> T:
    with lock if lock is not None else contextlib.nullcontext():
        return writing.write(work)


Outcome = tuple[bool, Any]  # (True, result) or (False, the exception raised)


def _run_group(conn: sa.Connection, works: list[Callable[[sa.Connection], Any]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    at = 0
    while at < len(works):
        work = works[at]
        if not isinstance(work, InsertRows):
            outcomes.append((True, work(conn)))
            at += 1
            continue
        merged: dict[sa.Table | Table, list[dict[str, Any]]] = {}
        while at < len(works) and isinstance(insert := works[at], InsertRows):  # a run of inserts: one statement a table
            for table, rows in insert.inserts:
                merged.setdefault(table, []).extend(rows)
            outcomes.append((True, None))
            at += 1
        for table, rows in merged.items():
            insert_rows(conn, table, rows)
    return outcomes


def write_group_sync(writing: Held, works: list[Callable[[sa.Connection], Any]], lock: FileLock | None = None,
                     wait: bool = True) -> list[Outcome]:
    """Run `works` in one transaction; if any of them fails, run each in a transaction of its
    own instead, so a write's failure is its own. Not to `wait` (on the event loop): `Busy`,
    nothing written, if another program holds SQLite's write lock when the group begins."""
    if len(works) > 1 or not wait:
        try:
            with lock if lock is not None else contextlib.nullcontext():
                return writing.write(lambda conn: _run_group(conn, works), wait)
        except Busy:
            raise
        except Exception as error:
            if len(works) == 1:
                return [(False, error)]
            # Rolled back whole: retried one by one below. (These may wait for the lock, should
            # another program take it in the microseconds between: rare enough on the loop.)
    outcomes: list[Outcome] = []
    for work in works:
        try:
            outcomes.append((True, write_sync(writing, work, lock)))
        except Exception as error:
            outcomes.append((False, error))
    return outcomes


class Checkpointer:
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
            f"busy_timeout={BUSY_TIMEOUT_S * 1000}",  # wait for other processes' locks rather than fail at once
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


def async_sqlite_dbapi(path: str) -> Any:
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


def hook_sqlite(engine: sa.Engine) -> None:
    sa.event.listen(engine, "connect", _sqlite_on_connect)
    sa.event.listen(engine, "begin", _sqlite_on_begin)


def _sqlite_on_begin(conn: sa.Connection) -> None:
    begin = conn.get_execution_options().get(BEGIN_OPTION, "BEGIN")
    driver = conn.connection.driver_connection
    if not isinstance(driver, sqlite3.Connection):  # the async engine's (aiosqlite)
        conn.exec_driver_sql(begin)
        return
    # On the driver itself: through SQLAlchemy's execution layer it was 6 of a small write's 30 µs.
    try:
        driver.execute(begin)
    except sqlite3.DatabaseError as error:  # as SQLAlchemy would raise it ("database is locked")
        raise sa.exc.DBAPIError.instance(begin, None, error, sqlite3.Error) from error
