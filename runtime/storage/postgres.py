"""PostgreSQL's side of the storage layer: its connections (`PgPool`), a work function run on one
of them in a greenlet (so that the same synchronous `work(connection)` serves both databases), and
the one connection that LISTENs for notifications.

`write()` and `read_with()` run their function on a pooled connection, the whole transaction (or,
in autocommit, each statement) in one greenlet whose statements wait on asyncpg, to the end even if
the caller is cancelled meanwhile. A connection the server has closed is replaced when next taken;
one that failed because the database could not serve is ended at once, without a round trip.

Greenlets rather than async work functions: the stores' work is the same synchronous function on
SQLite, where it runs on a thread of its own; the `greenlet` package is what SQLAlchemy's asyncio
support stands on, and what this replaces.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from contract.errors import InvalidRequestError
from runtime.storage.driver import IntegrityError, Ran
from runtime.storage.outage import PoolBusy, outage, sqlstate
from runtime.storage.sql import Sql
from runtime.storage.tasks import to_the_end

T = TypeVar("T")

log = logging.getLogger("stack")

POSTGRES_SCHEMES = frozenset({"postgres", "postgresql", "postgresql+asyncpg"})
POOL_TIMEOUT_S = 30.0  # how long a statement waits for one of the pool's connections to come free

NOTIFY = Sql("SELECT pg_notify(:channel, :payload)")
"""`Database.notify` on PostgreSQL."""


def asyncpg_dsn(dsn: str) -> str:
    """`dsn` as asyncpg takes it; a ValueError naming only its scheme (it may carry a password)
    if it is not a PostgreSQL DSN."""
    scheme = urlsplit(dsn).scheme
    if scheme not in POSTGRES_SCHEMES:
        raise ValueError(f"not a PostgreSQL DSN (scheme {scheme!r})")
    return "postgresql" + dsn[len(scheme):]


# --- a work function in a greenlet ---------------------------------------------------------------


@functools.cache
def _greenlets() -> tuple[type[Any], Callable[[], Any]]:
    """The greenlet class a work function runs in, and `greenlet.getcurrent`: made on first use, so
    that a stack on SQLite never imports the package."""
    import greenlet  # type: ignore[import-untyped]

    class Worker(greenlet.greenlet):  # type: ignore[misc]
        """The greenlet a work function runs in: `await_` hands its awaitables to the event loop."""

    return Worker, greenlet.getcurrent


def await_(awaitable: Awaitable[T]) -> T:
    """The result of `awaitable`, from a work function that `in_greenlet` runs."""
    worker, current = _greenlets()
    running = current()
    if not isinstance(running, worker):
        raise RuntimeError("a PostgreSQL statement was run outside Database.write or Database.read_with")
    return running.parent.switch(awaitable)  # type: ignore[no-any-return]


async def in_greenlet(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)`, whose `await_` calls are awaited here, on the event loop."""
    worker_class, current = _greenlets()
    parent = current()
    worker = worker_class(function, parent)
    worker.gr_context = parent.gr_context  # the caller's context variables, as the function's own (a new greenlet has none)
    step = worker.switch(*args)
    while not worker.dead:
        try:
            value = await step
        except BaseException as error:
            step = worker.throw(error)
        else:
            step = worker.switch(value)
    return step  # type: ignore[no-any-return]


# --- connections -----------------------------------------------------------------------------------


class PgConnection:
    """An asyncpg connection as a work function is given it (see runtime.storage.driver)."""

    __slots__ = ("driver",)
    dialect = "postgresql"

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def run(self, statement: Sql, batch: Sequence[Mapping[str, Any]], many: bool) -> Ran:
        import asyncpg  # type: ignore[import-untyped]  # (imported with the first connection)

        text, _ = statement.numbered()
        values = [statement.postgres_values(one) for one in batch]
        try:
            if many and len(values) > 1:
                await_(self.driver.executemany(text, values))
                return Ran([], len(values))
            if statement.returns_rows():
                rows = [tuple(row) for row in await_(self.driver.fetch(text, *values[0]))]
                return Ran(rows, len(rows))
            status: str = await_(self.driver.execute(text, *values[0]))  # "UPDATE 3", "INSERT 0 1"
        except asyncpg.IntegrityConstraintViolationError as error:
            raise IntegrityError(text, error) from error
        count = status.rsplit(" ", 1)[-1]
        return Ran([], int(count) if count.isdigit() else -1)

    def closed(self) -> bool:
        return bool(self.driver.is_closed())

    def terminate(self) -> None:
        """End the connection at once, with no round trip (a polite close waits for an answer)."""
        if not self.closed():
            self.driver.terminate()


async def connect(dsn: str, connect_timeout_s: float, command_timeout_s: float | None) -> PgConnection:
    import asyncpg  # (a stack on SQLite never imports it)

    return PgConnection(await asyncpg.connect(dsn, timeout=connect_timeout_s, command_timeout=command_timeout_s))


def in_transaction(connection: PgConnection, work: Callable[[PgConnection], T]) -> T:
    """`work` in one transaction: committed if it returns, rolled back if it raises (unless the
    database could not serve: the connection is then ended, which ends the transaction too)."""
    await_(connection.driver.execute("BEGIN"))
    try:
        result = work(connection)
    except BaseException as error:
        if outage(error) is None and not connection.closed():
            await_(connection.driver.execute("ROLLBACK"))
        raise
    await_(connection.driver.execute("COMMIT"))
    return result


def autocommitted(connection: PgConnection, work: Callable[[PgConnection], T]) -> T:
    """`work` with each statement a transaction of its own: what it reads under PostgreSQL's
    default isolation (READ COMMITTED) is the same as in one transaction, a snapshot per
    statement, without BEGIN and COMMIT round trips around it; one statement is atomic by itself."""
    return work(connection)


# PostgreSQL's text and JSONB hold no NUL character (U+0000), which JSON, OpenAI and SQLite take:
# "invalid byte sequence for encoding UTF8: 0x00" (22021), "unsupported Unicode escape sequence" (22P05).
_NUL_STATES = frozenset({"22021", "22P05"})
_NUL_MESSAGE = ("This server's database cannot store or look up text holding the null character (\\u0000), and this request's "
               "text (or the model's answer to it) holds one. Remove it and send the request again.")


class PgPool:
    """The connections `write` and `read_with` run on: at most `size` in use, opened when needed and
    kept between uses. A use waits up to POOL_TIMEOUT_S for one to come free (then 503: every
    connection stayed busy). A connection that a use ended with an outage (the database
    unreachable, a statement past command_timeout_s) is ended at once, without a round trip; one the
    server has closed meanwhile (a restart, an idle timeout) is dropped when next taken."""

    def __init__(self, dsn: str, size: int, connect_timeout_s: float, command_timeout_s: float | None) -> None:
        self.dsn = dsn
        self.size = size
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.idle: list[PgConnection] = []
        self.in_use = 0  # connections taken by a use now
        self._slots: asyncio.Semaphore | None = None

    async def run(self, step: Callable[[PgConnection, Callable[[PgConnection], T]], T], work: Callable[[PgConnection], T]) -> T:
        """`step(connection, work)` in a greenlet on a pooled connection, made to the end even if the
        caller is cancelled meanwhile (which is raised once it is made)."""
        return await to_the_end(asyncio.ensure_future(self._run(step, work)))

    async def _run(self, step: Callable[[PgConnection, Callable[[PgConnection], T]], T], work: Callable[[PgConnection], T]) -> T:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        if self._slots.locked():
            try:
                async with asyncio.timeout(POOL_TIMEOUT_S):
                    await self._slots.acquire()
            except TimeoutError:
                raise PoolBusy() from None
        else:
            await self._slots.acquire()
        self.in_use += 1
        try:
            connection = await self._take()
            try:
                result = await in_greenlet(step, connection, work)
            except BaseException as error:
                if outage(error) is not None or connection.closed():
                    connection.terminate()
                else:
                    self.idle.append(connection)
                if sqlstate(error) in _NUL_STATES:
                    raise InvalidRequestError(_NUL_MESSAGE, code="invalid_value") from None
                raise
            self.idle.append(connection)
            return result
        finally:
            self.in_use -= 1
            self._slots.release()

    async def _take(self) -> PgConnection:
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed():
                return connection
        return await connect(self.dsn, self.connect_timeout_s, self.command_timeout_s)

    def close(self) -> None:
        """End the idle connections at once: an idle connection holds no transaction, and a polite
        close waits for an answer that a connection the network stopped carrying never brings (the
        stack's shutdown with it). One in use is kept when its use ends, for the next."""
        idle, self.idle = self.idle, []
        for connection in idle:
            connection.terminate()


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
        import asyncpg  # (a stack on SQLite never imports it)

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
        if self._connection is not None and not self._connection.is_closed():
            self._connection.terminate()  # a polite close waits for an answer a silent network never brings
        self._connection = None
