"""`outage` tells a database that cannot serve from a request or a statement that is wrong: the
former is a 503 to retry, the latter stays what it was."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlean  # type: ignore[import-untyped]

from builder.config import PostgresBackend
from contract.errors import APIError, InvalidRequestError
from runtime.storage import INTEGER, Column, IntegrityError, Sql, StorageUnavailableError, open_database, postgres, table
from runtime.storage.migrations import _SCHEMA_LOCK
from runtime.storage.outage import PoolBusy, outage, unavailable
from support.postgres import fresh_database
from support.tcp_proxy import postgres_behind_proxy


def _sqlite_error(path: Path, *statements: str, uri: bool = False) -> BaseException:
    """The error SQLite itself raises for the last of `statements` on the database at `path`."""
    connection = None
    try:
        connection = sqlean.connect(str(path), isolation_level=None, uri=uri)
        for statement in statements:
            connection.execute(statement)
    except sqlean.Error as error:
        return error  # type: ignore[no-any-return]
    finally:
        if connection is not None:
            connection.close()
    raise AssertionError("SQLite took every statement")


def test_sqlite_errors_of_a_database_that_cannot_take_the_operation(tmp_path: Path) -> None:
    sqlean.connect(str(tmp_path / "made.db")).execute("CREATE TABLE t (x)").connection.close()
    full = _sqlite_error(tmp_path / "full.db", "CREATE TABLE t (x)", "PRAGMA max_page_count = 2",
                         "INSERT INTO t SELECT randomblob(4000) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                         "WHERE i < 20) SELECT i FROM n)")
    read_only = _sqlite_error(Path(f"file:{tmp_path / 'made.db'}?mode=ro"), "INSERT INTO t VALUES (1)", uri=True)
    cannot_open = _sqlite_error(tmp_path / "missing" / "x.db", "SELECT 1")
    assert outage(full) == "the database's disk is full"
    assert outage(read_only) == "the database file is read-only"
    assert outage(cannot_open) == "the database file cannot be opened"
    # Wrapped, it reads the same: carried as `orig` (as IntegrityError carries the driver's error), or raised from it.
    assert outage(IntegrityError("INSERT", full)) == "the database's disk is full"
    try:
        raise RuntimeError("wrapped") from full
    except RuntimeError as wrapped:
        assert outage(wrapped) == "the database's disk is full"


def test_sqlite_errors_of_a_wrong_statement_are_not_an_outage(tmp_path: Path) -> None:
    syntax = _sqlite_error(tmp_path / "a.db", "SELEC 1")
    duplicate = _sqlite_error(tmp_path / "b.db", "CREATE TABLE t (x PRIMARY KEY)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)")
    missing = _sqlite_error(tmp_path / "c.db", "SELECT * FROM nowhere")
    for error in (syntax, duplicate, IntegrityError("INSERT", duplicate), missing, ValueError("x"), KeyError("y"), InvalidRequestError("bad")):
        assert outage(error) is None, error
        assert unavailable(error, "a test") is None


@pytest.mark.parametrize(("error", "reason"), [
    (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), "the database server is starting up"),
    (asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"), "the database server is shutting down"),
    (asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients already"), "the database server has no free connections"),
    (asyncpg.exceptions.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
     "the database is read-only (a standby)"),
    (asyncpg.exceptions.DiskFullError("could not extend file"), "the database server's disk is full"),
    (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
     "the connection to the database was lost"),
    (asyncpg.exceptions.InterfaceError("cannot call Connection.execute(): connection is closed"), "the connection to the database was lost"),
    (ConnectionRefusedError(111, "Connection refused"), "the database could not be reached: Connection refused"),
    (socket.gaierror(-2, "Name or service not known"), "the database could not be reached: Name or service not known"),
    (PoolBusy(), "every connection to the database stayed busy"),
])
def test_postgresql_failures_of_the_server_not_the_statement(error: BaseException, reason: str) -> None:
    assert outage(error) == reason
    try:  # as it reaches the storage layer: raised from inside another error (`from`)
        raise RuntimeError("wrapped") from error
    except RuntimeError as wrapped:
        assert outage(wrapped) == reason


@pytest.mark.parametrize("error", [
    asyncpg.exceptions.UniqueViolationError("duplicate key value"),
    asyncpg.exceptions.UndefinedTableError('relation "x" does not exist'),
    asyncpg.exceptions.InterfaceError("cannot perform operation: another operation is in progress"),
])
def test_postgresql_errors_of_the_statement_are_not_an_outage(error: BaseException) -> None:
    assert outage(error) is None


def test_an_os_error_is_the_databases_only_where_it_is_known_to_come_from_it() -> None:
    full = OSError(28, "No space left on device")  # a file upload's disk, say
    assert outage(full, from_database=False) is None
    assert unavailable(full, "a route", from_database=False) is None
    try:  # the same error inside a database driver's: the database's
        raise asyncpg.exceptions.InterfaceError("connection failed") from full
    except asyncpg.exceptions.InterfaceError as wrapped:
        assert outage(wrapped, from_database=False) == "the database could not be reached: No space left on device"
    try:  # only raised while handling a database error (no `from`): not the database's
        try:
            raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")
        except asyncpg.exceptions.ConnectionDoesNotExistError:
            raise ValueError("a bug in the handler")
    except ValueError as unrelated:
        assert outage(unrelated) is None


def test_the_503_says_why_and_asks_for_a_retry() -> None:
    down = unavailable(ConnectionRefusedError(111, "Connection refused"), "a test")
    assert isinstance(down, StorageUnavailableError) and isinstance(down, APIError)
    assert (down.status, down.error_type, down.code, down.headers) == (503, "service_unavailable", "storage_unavailable", {"retry-after": "1"})
    assert down.message == ("The server's database is unavailable right now (the database could not be reached: Connection refused). "
                            "Try the request again shortly.")
    assert unavailable(down, "again") is down  # converted once, however many layers it passes


async def test_a_postgresql_server_that_refuses_connections_is_a_503_and_a_failed_ping(unused_tcp_port: int) -> None:
    db = open_database(PostgresBackend(type="postgres", dsn=f"postgresql://postgres@127.0.0.1:{unused_tcp_port}/none",
                                       connect_timeout_s=2))
    try:
        with pytest.raises(StorageUnavailableError, match="could not be reached") as refused:
            await db.read_one(Sql("SELECT 1"))
        assert isinstance(refused.value.__cause__, OSError)
        assert (await db.ping()).startswith("the database could not be reached")  # type: ignore[union-attr]
    finally:
        await db.close()


async def test_a_postgresql_server_that_does_not_answer_is_a_failed_ping_within_its_timeout() -> None:
    # A listening socket that never accepts nor answers: the connection attempt hangs.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)
        db = open_database(PostgresBackend(type="postgres", dsn=f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/none",
                                           connect_timeout_s=3))
        try:
            assert await db.ping(timeout_s=0.2) == "no answer within 0.2 s"
            # The same ping is still under way: asked again, the route joins it rather than opening another.
            ping = db._ping
            assert await db.ping(timeout_s=0.2) == "no answer within 0.2 s"
            assert db._ping is ping
            with pytest.raises(StorageUnavailableError):  # and the connect timeout ends it
                await ping  # type: ignore[misc]
        finally:
            await db.close()


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    with fresh_database() as dsn:
        yield dsn


@pytest.mark.postgres
async def test_the_schema_waits_for_another_replicas_past_the_command_timeout_and_statements_do_not(pg_dsn: str) -> None:
    db = open_database(PostgresBackend(type="postgres", dsn=pg_dsn, command_timeout_s=1))
    replica = await asyncpg.connect(pg_dsn)
    try:
        # Another replica making the schema: it holds the schema lock for 2 s, past the 1 s limit.
        await replica.execute(f"SELECT pg_advisory_lock({_SCHEMA_LOCK})")
        releasing = asyncio.get_running_loop().call_later(2, lambda: asyncio.ensure_future(
            replica.execute(f"SELECT pg_advisory_unlock({_SCHEMA_LOCK})")))
        await db.create_tables([table("t", Column("k", INTEGER, primary_key=True))])  # waited the 2 s, unbounded
        releasing.cancel()
        assert await db.read_one(Sql("SELECT count(*) FROM t")) == (0,)
        assert db._pg is not None and len(db._pg.idle) == 1  # (the schema's connection was its own, and is gone)
        # A statement of a request is bound: one that takes 3 s is a 503 after 1.
        with pytest.raises(StorageUnavailableError, match="did not answer in time"):
            await db.read_one(Sql("SELECT pg_sleep(3)"))
        assert db._pg.idle == [] and db.connections_in_use == 0  # its connection ended, not kept
        assert await db.ping() is None  # and the next one has a connection of its own
    finally:
        await replica.close()
        await db.close()


@pytest.mark.postgres
async def test_a_listen_connection_a_partition_silenced_is_made_again(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "LISTEN_CHECK_S", 0.3)
    with postgres_behind_proxy(pg_dsn) as (proxied, proxy):
        db = open_database(PostgresBackend(type="postgres", dsn=proxied))
        heard: list[str] = []
        await db.subscribe("stack_test", heard.append)
        await db.notify("stack_test", "before")
        other = await asyncpg.connect(pg_dsn)  # another replica, on a network that works
        try:
            for _ in range(50):
                if "before" in heard:
                    break
                await asyncio.sleep(0.05)
            proxy.blackhole()  # this process's connections, the LISTEN one among them, carry nothing more
            for _ in range(100):  # a notification sent while the old connection was silent is lost: sent again
                await other.execute("SELECT pg_notify('stack_test', 'after')")
                if "after" in heard:
                    break
                await asyncio.sleep(0.1)
            assert heard[0] == "before" and "after" in heard  # heard again, on a connection made anew
        finally:
            await other.close()
            await db.close()


@pytest.mark.postgres
async def test_closing_a_database_the_network_silenced_ends(pg_dsn: str) -> None:
    with postgres_behind_proxy(pg_dsn) as (proxied, proxy):
        db = open_database(PostgresBackend(type="postgres", dsn=proxied, pool_size=4))

        async def read() -> None:
            await db.read_one(Sql("SELECT pg_sleep(0.2)"))

        await db.subscribe("stack_test", lambda _payload: None)  # the LISTEN connection, too
        await asyncio.gather(*(read() for _ in range(4)))  # four connections kept
        assert db._pg is not None and len(db._pg.idle) == 4
        proxy.blackhole()
        # Each connection's polite close would wait for ever on a network that carries nothing: ended at once.
        await asyncio.wait_for(db.close(), 10)
        assert db._pg.idle == []
