"""Ingestion while the database goes away: the file is neither failed for it nor left behind. Its
lease lapses, and a worker (the same one: workers outlive any one file) takes it up again once the
database answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
import pytest

from builder.config import PostgresBackend
from providers.vector_stores.builtin.ingest import Ingestor
from providers.vector_stores.builtin.tables import TABLES, files, stores
from contract.files.protocol import FileContent
from runtime.storage import Sql, insert_rows, loads, open_database
from support.postgres import fresh_database
from support.tcp_proxy import TcpProxy, postgres_behind_proxy

pytestmark = pytest.mark.postgres

TEXT = b"The secret color is teal. " * 40


class CuttingFiles:
    """The Files API's side of ingestion (a test fake): the first read of a file cuts the database
    away, as if it had gone down while the file was being chunked."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.reads = 0

    async def file_content(self, file_id: str) -> FileContent:
        self.reads += 1
        if self.reads == 1:
            self.proxy.cut()

        async def chunks() -> AsyncIterator[bytes]:
            yield TEXT

        return FileContent(chunks=chunks(), size=len(TEXT), filename="notes.txt")


@pytest.fixture
def proxied_dsn() -> Iterator[tuple[str, TcpProxy]]:
    with fresh_database() as dsn, postgres_behind_proxy(dsn) as proxied:
        yield proxied


async def test_a_file_whose_ingestion_loses_the_database_is_taken_up_again_not_failed(proxied_dsn: tuple[str, TcpProxy]) -> None:
    dsn, proxy = proxied_dsn
    db = open_database(PostgresBackend(type="postgres", dsn=dsn, connect_timeout_s=2))
    await db.create_tables(TABLES)
    now = int(time.time())
    await db.write(lambda connection: insert_rows(connection, stores, [{"id": "vs_1", "created_at": now, "last_active_at": now}]))
    await db.write(lambda connection: insert_rows(connection, files, [{
        "vector_store_id": "vs_1", "file_id": "file-1", "filename": "notes.txt", "created_at": now, "status": "in_progress",
        "usage_bytes": 0, "chunk_tokens": 100, "overlap_tokens": 20, "attempt": ""}]))
    read_status = Sql("SELECT status, CAST(last_error AS TEXT) FROM vector_store_files")
    reader = CuttingFiles(proxy)
    ingestor = Ingestor(db, reader, None, workers=1, lease_s=1.5, poll_s=0.1)  # type: ignore[arg-type]  # only file_content is read
    await ingestor.start()
    try:
        ingestor.wake([("vs_1", "file-1")])
        while reader.reads == 0:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # the chunks' write refused meanwhile
        proxy.restore()
        status = None
        for _ in range(100):  # the lease (1.5 s) lapses, and the one worker takes the file up again
            status = await db.read_one(read_status)
            if status is not None and status[0] != "in_progress":
                break
            await asyncio.sleep(0.1)
        assert status is not None
        assert (status[0], loads(status[1])) == ("completed", None)  # not failed for the database's outage
        assert reader.reads == 2
        assert all(not task.done() for task in ingestor._tasks)  # the worker lived through it
    finally:
        await ingestor.stop()
        await db.close()
