"""PostgreSQL's side of the storage layer: the connections `write` and `read_with` keep, the steps
they run in one hop into SQLAlchemy's greenlet (a transaction, or autocommit), and the one
connection that LISTENs for notifications.

`write()` and `read_with()` run their function on a connection kept checked out between uses (up
to half the pool), the whole transaction in one hop into SQLAlchemy's greenlet, and to the end even
if the caller is cancelled meanwhile. A connection the server has closed is replaced when next
used, where SQLAlchemy's pre-ping would ask the server on every use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from runtime.errors import InvalidRequestError
from runtime.storage.outage import outage
from runtime.storage.statements import Prepared
from runtime.storage.tasks import to_the_end

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")

log = logging.getLogger("stack")

POSTGRES_SCHEMES = frozenset({"postgres", "postgresql", "postgresql+asyncpg"})


# `Database.notify` on PostgreSQL: a statement built once, run on asyncpg in autocommit, where a text
# statement built per call cost SQLAlchemy's compile-cache lookup and execution layer each time.
NOTIFY = Prepared(sa.select(sa.func.pg_notify(sa.bindparam("channel", type_=sa.String), sa.bindparam("payload", type_=sa.String))))


def closed_by_server(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """The pool's check before it hands out a connection: one the server has closed (a restart, an
    idle timeout, `pg_terminate_backend`) is dropped and another made. asyncpg marks a connection
    closed as soon as the event loop sees the server close it. SQLAlchemy's `pool_pre_ping` asks
    the server instead: three round trips (BEGIN, an empty query, ROLLBACK) on every checkout."""
    if _closed(dbapi_connection.driver_connection):
        raise sa.exc.DisconnectionError("the server closed this connection")


def drop_at_once(context: sa.engine.ExceptionContext) -> None:
    """SQLAlchemy's hook on a statement's error: a connection the database stopped answering (its
    statement past command_timeout_s, say) is ended here, at once. SQLAlchemy would close it
    politely, waiting up to 2 s for a database that may never answer, before it gave the error."""
    if context.connection is not None and outage(context.original_exception) is not None:
        _terminate(context.connection.connection.driver_connection)


def _closed(driver_connection: Any) -> bool:
    return driver_connection is None or bool(driver_connection.is_closed())


def _terminate(driver_connection: Any) -> None:
    """End an asyncpg connection at once, with no round trip (its polite close waits for an answer)."""
    if not _closed(driver_connection):
        driver_connection.terminate()


def in_transaction(connection: sa.Connection, work: Callable[[sa.Connection], T]) -> T:
    with connection.begin():
        return work(connection)


def autocommitted_read(connection: sa.Connection, work: Callable[[sa.Connection], T]) -> T:
    """`work` with each statement a transaction of its own: what it reads under PostgreSQL's
    default isolation (READ COMMITTED) is the same as in one transaction, a snapshot per
    statement, without BEGIN and ROLLBACK round trips around it."""
    with _autocommit(connection):
        try:
            return work(connection)
        finally:
            connection.rollback()  # SQLAlchemy's own bookkeeping: no round trip in autocommit


def autocommitted_write(connection: sa.Connection, work: Callable[[sa.Connection], T]) -> T:
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


# PostgreSQL's text and JSONB hold no NUL character (U+0000), which JSON, OpenAI and SQLite take:
# "invalid byte sequence for encoding UTF8: 0x00" (22021), "unsupported Unicode escape sequence" (22P05).
_NUL_STATES = frozenset({"22021", "22P05"})
_NUL_MESSAGE = ("This server's database cannot store or look up text holding the null character (\\u0000), and this request's "
               "text (or the model's answer to it) holds one. Remove it and send the request again.")


def _holds_nul(error: BaseException) -> bool:
    """Whether `error` is PostgreSQL refusing a NUL character, however wrapped (SQLAlchemy's
    DBAPIError around its adapter's error around asyncpg's)."""
    seen: BaseException | None = error
    for _ in range(4):
        if seen is None:
            return False
        if str(getattr(seen, "sqlstate", "")) in _NUL_STATES:
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


class PgConnections:
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
        return await to_the_end(asyncio.ensure_future(self._run(step, work)))

    async def _run(self, step: Callable[[sa.Connection, Callable[[sa.Connection], T]], T], work: Callable[[sa.Connection], T]) -> T:
        connection = await self._take()
        try:
            result = await connection.run_sync(step, work)
        except BaseException as error:
            if outage(error) is not None:
                # Dropped, not given back: the pool's reset (a ROLLBACK) would wait on a connection
                # the database may never answer (see drop_at_once).
                await connection.invalidate()
            else:
                await connection.close()
            if _holds_nul(error):
                raise InvalidRequestError(_NUL_MESSAGE, code="invalid_value") from None
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
        """End the kept connections at once: given back to the pool, each would be reset with a
        ROLLBACK, a round trip that a connection the network stopped carrying waits out to
        command_timeout_s (the stack's shutdown with it). An idle connection holds no transaction."""
        idle, self.idle = self.idle, []
        for connection in idle:
            if (sync := connection.sync_connection) is not None and not sync.invalidated:
                _terminate(sync.connection.driver_connection)
            await connection.invalidate()


LISTEN_CHECK_S = 15.0  # how often the LISTEN connection must answer a query to be kept


class PgListener:
    """One asyncpg connection of this process that LISTENs on the channels subscribed to, made on
    the first subscription and made again (with every channel) if it is lost.

    A connection the network stops carrying (a partition, a failover that moves the database's
    address) is never closed by anything: it only waits for notifications that no longer come,
    while the other processes' signals (a cancel, a response's new events) are lost to this one
    for the rest of its life. So every LISTEN_CHECK_S it must answer `SELECT 1` within a third of
    that, or it is ended and made again."""

    def __init__(self, dsn: str, deliver: Callable[[str, str], None], connect_timeout_s: float = 10.0) -> None:
        self.dsn = dsn
        self.deliver = deliver
        self.connect_timeout_s = connect_timeout_s
        self.channels: set[str] = set()
        self._connection: Any = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._reconnecting: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def listen(self, channel: str) -> None:
        async with self._lock:
            self._closed = False
            self.channels.add(channel)
            if self._connection is None or self._connection.is_closed():
                await self._connect()
            else:
                await self._connection.add_listener(channel, self._on_notification)

    async def _connect(self) -> None:
        import asyncpg  # type: ignore[import-untyped]  # (a stack on SQLite never imports it)

        connection = await asyncpg.connect(self.dsn, timeout=self.connect_timeout_s)
        for channel in self.channels:
            await connection.add_listener(channel, self._on_notification)
        connection.add_termination_listener(self._on_lost)
        self._connection = connection
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while not self._closed:
            await asyncio.sleep(LISTEN_CHECK_S)
            connection = self._connection
            if connection is None or connection.is_closed() or self._reconnecting is not None:
                continue
            try:
                async with self._lock:  # not beside a LISTEN of `listen` on the same connection
                    if connection is not self._connection:
                        continue
                    await connection.fetchval("SELECT 1", timeout=LISTEN_CHECK_S / 3)
            except Exception as error:
                log.warning("the connection listening for notifications did not answer (%s): it is made again",
                            type(error).__name__)
                connection.terminate()
                self._on_lost(connection)

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
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        _terminate(self._connection)  # a polite close waits for an answer a silent network never brings
        self._connection = None
