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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import sqlean as sqlite3  # type: ignore[import-untyped]

from runtime.storage.schema import Table
from runtime.storage.sql import InsertRows, insert_rows

T = TypeVar("T")

log = logging.getLogger("stack")

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
    """One connection, kept for one use at a time (the writes, the small reads made on the event
    loop, or one reading thread's reads), by one thread at a time, which the caller sees to. It is
    opened on first use. After an error its transaction is rolled back, and if even that fails the
    connection is closed and the next use opens another: one in a state not known is never used
    again."""

    __slots__ = ("_path", "_connection")

    def __init__(self, path: Path) -> None:
        self._path = path
        self._connection: Any = None

    def _get(self) -> Any:
        if self._connection is None:
            self._connection = connect(self._path)
        return self._connection

    def write(self, work: Callable[[Any], T], wait: bool = True) -> T:
        """`work(connection)` in a transaction: committed if it returns, rolled back if it raises.
        Not to `wait`: `Busy` at once, rather than SQLite's wait of up to BUSY_TIMEOUT_S, if
        another program holds the file's write lock (only the BEGIN takes it, in WAL mode)."""
        connection = self._get()
        # IMMEDIATE takes the write lock up front: a deferred transaction that reads before writing
        # can fail to upgrade its lock without waiting busy_timeout.
        if wait:
            connection.execute("BEGIN IMMEDIATE")
        else:
            _begin_now(connection)
        try:
            result = work(connection)
            connection.execute("COMMIT")
        except BaseException:
            self._roll_back()
            raise
        return result

    def read(self, work: Callable[[Any], T]) -> T:
        """`work(connection)` in one transaction (one snapshot of the database), ended after it."""
        connection = self._get()
        connection.execute("BEGIN")
        try:
            result = work(connection)
        except BaseException:
            self._roll_back()
            raise
        connection.execute("ROLLBACK")
        return result

    def _roll_back(self) -> None:
        try:
            if self._connection is not None and self._connection.in_transaction:
                self._connection.execute("ROLLBACK")
        except sqlite3.Error:
            self.close()

    def close(self) -> None:
        """Close the connection; the next use opens one again."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _begin_now(connection: Any) -> None:
    connection.set_busy_timeout(0)  # sqlean's own call: a C call, where a PRAGMA each way cost 2.9 µs
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        if getattr(error, "sqlite_errorcode", 0) & 0xFF == _SQLITE_BUSY:
            raise Busy() from error
        raise
    finally:
        connection.set_busy_timeout(BUSY_TIMEOUT_S)


def write_sync(writing: Held, work: Callable[[Any], T], lock: FileLock | None = None) -> T:
    with lock if lock is not None else contextlib.nullcontext():
        return writing.write(work)


Outcome = tuple[bool, Any]  # (True, result) or (False, the exception raised)


def _run_group(conn: Any, works: list[Callable[[Any], Any]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    at = 0
    while at < len(works):
        work = works[at]
        if not isinstance(work, InsertRows):
            outcomes.append((True, work(conn)))
            at += 1
            continue
        merged: dict[Table, list[Mapping[str, Any]]] = {}
        while at < len(works) and isinstance(insert := works[at], InsertRows):  # a run of inserts: one statement a table
            for table, rows in insert.inserts:
                merged.setdefault(table, []).extend(rows)
            outcomes.append((True, None))
            at += 1
        for table, rows in merged.items():
            insert_rows(conn, table, rows)
    return outcomes


def write_group_sync(writing: Held, works: list[Callable[[Any], Any]], lock: FileLock | None = None,
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


def _lowest_priority() -> None:
    """This thread at the lowest CPU priority (nice 19; Linux sets it per thread). A checkpoint
    copies half a second of WAL frames into the database file: on the core the event loop runs on,
    it took the loop's time from the requests under way, a 1 to 6 ms stall every half second at
    c=1 (bench/tail.py). At nice 19 it runs in the loop's idle moments, and under full load still
    gets a share of the core (never starved, as SCHED_IDLE could be, so the WAL stays short)."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not permitted: as before
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class Checkpointer:
    """A thread that checkpoints one SQLite database's WAL every CHECKPOINT_EVERY_S seconds,
    on a connection of its own. PASSIVE: it never waits for, nor blocks, readers and writers."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        _lowest_priority()
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


def connect(path: Path) -> Any:
    """A connection to the database file at `path`, set up as every one of the stack's is: sqlite-vec
    loaded, WAL, and BEGIN left to the caller (no transaction the driver would open by itself)."""
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)  # (it moves between our threads)
    try:
        _load_vec(connection)
        for pragma in (
            "journal_mode=WAL",  # readers do not block the writer, nor it them
            "synchronous=NORMAL",  # durable at checkpoints; safe against corruption in WAL
            f"busy_timeout={BUSY_TIMEOUT_S * 1000}",  # wait for other processes' locks rather than fail at once
            "foreign_keys=ON",
            f"wal_autocheckpoint={AUTOCHECKPOINT_PAGES}",  # the checkpoint thread does it (see the module's doc)
        ):
            connection.execute(f"PRAGMA {pragma}").fetchall()
    except BaseException:
        connection.close()
        raise
    return connection
