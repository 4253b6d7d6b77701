"""When the database, not the request, is why a storage call failed: the server cannot reach
PostgreSQL (refused, dropped, restarting, out of connections, a read-only standby after a
failover) or SQLite cannot take the write (its disk full, its file read-only or gone, its lock held
by another process past the wait). Such a failure is the client's to retry, not a bug to report:
`StorageUnavailableError` answers it 503 with `Retry-After` (the `openai` SDK retries it), and the
log gets one line, not a traceback per request.

Told by the errors' own attributes (SQLSTATE, SQLite's error code, the OS error), however they are
wrapped, so that this module imports no driver.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from contract.errors import ServiceUnavailableError

__all__ = ["PoolBusy", "StorageUnavailableError", "outage", "sqlstate", "unavailable", "when_back"]

T = TypeVar("T")

log = logging.getLogger("stack")

RETRY_AFTER_S = 1
LOG_EVERY_S = 10.0  # while the database stays down, one line per this many seconds

# PostgreSQL's SQLSTATEs of a server that cannot serve now, beside the whole 08 class (connection exceptions).
_PG_STATES = {
    "57P01": "the database server is shutting down",
    "57P02": "the database server is shutting down",
    "57P03": "the database server is starting up",
    "53300": "the database server has no free connections",
    "53100": "the database server's disk is full",
    "25006": "the database is read-only (a standby)",
}
# SQLite's primary result codes of a database that cannot take the operation now.
_SQLITE_CODES = {
    5: "the database file is locked by another process",  # SQLITE_BUSY, past busy_timeout
    7: "the database ran out of memory",  # SQLITE_NOMEM
    8: "the database file is read-only",  # SQLITE_READONLY
    10: "the database file could not be read or written (an I/O error)",  # SQLITE_IOERR
    13: "the database's disk is full",  # SQLITE_FULL
    14: "the database file cannot be opened",  # SQLITE_CANTOPEN
}


class StorageUnavailableError(ServiceUnavailableError):
    """The database could not serve this request now; the request itself was fine."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"The server's database is unavailable right now ({reason}). Try the request again shortly.",
                         code="storage_unavailable", headers={"retry-after": str(RETRY_AFTER_S)})
        self.reason = reason


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of PostgreSQL's refusal in `error` (as the driver raised it, or wrapped as the
    `orig` or the cause of another error), or None."""
    seen: BaseException | None = error
    for _ in range(4):
        if seen is None:
            return None
        if (state := getattr(seen, "sqlstate", None)) is not None:
            return str(state)
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


class PoolBusy(Exception):
    """Every connection of the pool stayed in use for as long as a statement waits for one."""


def outage(error: BaseException, *, from_database: bool = True) -> str | None:
    """Why the database could not serve, if that is what `error` (however wrapped) says; None for
    any other failure (a bug, a constraint, a statement the database refused). An OS error is the
    database's only where the error is known to come from it: raised by a call to the database
    (`from_database`), or wrapped in a database driver's error."""
    if isinstance(error, StorageUnavailableError):
        return error.reason
    seen: BaseException | None = error
    for _ in range(6):
        if seen is None:
            return None
        if isinstance(seen, TimeoutError) and (from_database or seen is not error):  # connect_timeout_s, command_timeout_s
            return "the database did not answer in time"
        if isinstance(seen, OSError) and (from_database or seen is not error):  # refused, reset, the host unknown
            return f"the database could not be reached: {seen.strerror or type(seen).__name__}"
        state = str(getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None) or "")
        if state.startswith("08"):
            return "the connection to the database was lost"
        if state in _PG_STATES:
            return _PG_STATES[state]
        code = getattr(seen, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE_CODES:
            return _SQLITE_CODES[code & 0xFF]
        if isinstance(seen, PoolBusy):
            return "every connection to the database stayed busy"
        # asyncpg's: a statement on a connection the server (or the network) closed.
        if type(seen).__name__ in ("ConnectionDoesNotExistError", "InterfaceError") and "closed" in str(seen):
            return "the connection to the database was lost"
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


class _Throttle:
    """One log line per outage, then one per LOG_EVERY_S while it lasts."""

    def __init__(self) -> None:
        self.logged_at = -LOG_EVERY_S
        self.quiet = 0

    def log(self, where: str, reason: str, error: BaseException) -> None:
        now = time.monotonic()
        if now - self.logged_at < LOG_EVERY_S:
            self.quiet += 1
            return
        more = f" ({self.quiet} more since the last line)" if self.quiet else ""
        log.warning("storage unavailable for %s: %s [%s: %s]%s", where, reason, type(error).__name__,
                    str(error).splitlines()[0][:300] if str(error) else "", more)
        self.logged_at, self.quiet = now, 0


_THROTTLE = _Throttle()


def unavailable(error: BaseException, where: str, *, from_database: bool = True) -> StorageUnavailableError | None:
    """`error` as the 503 it should be answered with (logged, throttled), or None if the database
    is not why it failed (`from_database`: as for `outage`)."""
    if isinstance(error, StorageUnavailableError):
        return error
    reason = outage(error, from_database=from_database)
    if reason is None:
        return None
    _THROTTLE.log(where, reason, error)
    return StorageUnavailableError(reason)


async def when_back(work: Callable[[], Awaitable[T]], *, within_s: float, first_wait_s: float = 0.25, longest_wait_s: float = 5.0) -> T:
    """`work()`, made again while the database cannot serve (`StorageUnavailableError`), waiting
    longer each time (up to `longest_wait_s`), until it can or `within_s` have passed; then the
    last error is raised. For the server's own writes that must land (a response's end), not for
    a client's request, which is answered 503 at once."""
    deadline = time.monotonic() + within_s
    wait = first_wait_s
    while True:
        try:
            return await work()
        except StorageUnavailableError:
            if time.monotonic() + wait > deadline:
                raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, longest_wait_s)
