"""Ingestion as a durable job: a vector store file is `in_progress` until a worker has extracted,
chunked and indexed it, then `completed`, or `failed` with `last_error` saying why.

A worker claims a file by taking its lease (the row's `lease_owner`/`lease_until`, with a fresh
`attempt` token) and keeps renewing it while it works. A process that dies mid-ingestion leaves
an expired lease: any worker (this process after a restart, another replica) claims the file
again, and the new attempt removes the rows the dead one wrote. Every write of a worker is
conditional on still holding the lease, so a file deleted, re-attached or cancelled meanwhile
is never marked by a stale worker; its rows are removed instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from providers.vector_stores.builtin.chunking import chunk_text
from providers.vector_stores.builtin.embedding import EmbeddingError, EmbeddingModel, Embeddings, model_of
from providers.vector_stores.builtin.extract import ExtractionError, text_pieces
from providers.vector_stores.builtin.tables import chunks, files, stores
from providers.vector_stores.builtin.vectors import insert_vectors
from runtime.apis.files.protocol import FilesProvider
from runtime.errors import NotFoundError
from runtime.ids import random_hex
from runtime.owners import owner_is_gone, process_owner
from runtime.quotas import meter_tokens, reset_meter
from runtime.storage import Database, StorageUnavailableError

__all__ = ["Ingestor", "Job"]

log = logging.getLogger("stack")

INSERT_BATCH = 64


@dataclass(frozen=True)
class Job:
    vector_store_id: str
    file_id: str
    filename: str
    attempt: str
    chunk_tokens: int
    overlap_tokens: int
    embedding: EmbeddingModel | None = None


class _LeaseLost(Exception):
    """The file was deleted, re-attached or cancelled under the worker."""


TokenMeter = Callable[[int], Awaitable[None]]
_MAX_METERS = 10_000


class Ingestor:
    """Runs `workers` ingestion tasks; `wake()` when a file is attached."""

    def __init__(self, db: Database, files_api: FilesProvider, inference: Embeddings | None, *, workers: int, lease_s: float,
                 poll_s: float) -> None:
        self.db = db
        self.files_api = files_api
        self.inference = inference
        self.owner = process_owner()
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._wake = asyncio.Event()
        self._meters: dict[tuple[str, str], TokenMeter] = {}
        """The token quotas files attached in this process count their embeddings against (their
        attacher's), by (store, file); a file taken up by another process counts against none."""
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._ended: dict[tuple[str, str], asyncio.Event] = {}
        """Set when this process's worker is done with the file (store id, file id): for `settle`."""

    async def start(self) -> None:
        """Free the files whose worker's process is gone (a crash on this host: see
        runtime.owners), then start the workers, which take them up at once."""
        rows = await self.db.fetch_all(sa.select(files.c.seq, files.c.attempt, files.c.lease_owner).where(
            files.c.status == "in_progress", files.c.lease_owner.is_not(None), files.c.lease_until >= time.time()))
        for row in rows:
            if owner_is_gone(row["lease_owner"]):
                await self.db.execute(files.update().where(files.c.seq == row["seq"], files.c.attempt == row["attempt"],
                                                           files.c.status == "in_progress").values(lease_until=None))
        self._tasks = [asyncio.get_running_loop().create_task(self._work()) for _ in range(self._workers)]

    async def stop(self) -> None:
        """Stop working, and give up the leases of the files under way: they are taken up again
        at once by another replica, or by the next start."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        try:
            await self.db.execute(files.update().where(files.c.lease_owner == self.owner, files.c.status == "in_progress")
                                  .values(lease_owner=None, lease_until=None))
        except Exception:  # the database is gone too: the leases lapse instead
            log.exception("could not give up the ingestion leases of this process")

    def wake(self, attached: Iterable[tuple[str, str]] = (), meter: TokenMeter | None = None) -> None:
        """Files were `attached` (store id, file id): take them up; their embeddings count against
        `meter` (the attaching request's token quota, `runtime.quotas.token_meter()`), if any. The
        caller then `settle`s them, which also forgets their end events."""
        for key in attached:
            self._ended.setdefault(key, asyncio.Event())
            if meter is not None:
                self._meters[key] = meter
        while len(self._meters) > _MAX_METERS:  # files another process took up: the oldest go
            del self._meters[next(iter(self._meters))]
        self._wake.set()

    async def settle(self, attached: Iterable[tuple[str, str]], timeout_s: float) -> None:
        """Wait, up to `timeout_s`, until this process's workers are done with the files just
        `attached` (woken): a small file is then answered `completed` rather than polled for. A
        file another process took up, or one behind a queue, is simply still `in_progress`."""
        keys = list(attached)
        events = [event for event in (self._ended.get(key) for key in keys) if event is not None and not event.is_set()]
        try:
            if events and timeout_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), timeout_s)
        finally:
            for key in keys:
                self._ended.pop(key, None)

    async def _work(self) -> None:
        while True:
            try:
                job = await self._claim()
            except StorageUnavailableError:
                job = None  # said by the storage layer; tried again in poll_s
            except Exception:
                log.exception("claiming an ingestion job failed; trying again in %.0f s", self.poll_s)
                job = None
            if job is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                continue
            try:
                await self.run(job)
            except Exception:  # a worker outlives any one file: the file's lease lapses, and it is taken up again
                log.exception("ingesting %s into %s stopped", job.file_id, job.vector_store_id)

    async def _claim(self) -> Job | None:
        now = time.time()
        claimable = sa.and_(files.c.status == "in_progress", sa.or_(files.c.lease_until.is_(None), files.c.lease_until < now))
        candidates = await self.db.fetch_all(
            sa.select(files, stores.c.embedding_model, stores.c.embedding_dimension, stores.c.embedding_sends_dimension)
            .select_from(files.join(stores, stores.c.id == files.c.vector_store_id)).where(claimable).order_by(files.c.seq).limit(8))
        for row in candidates:
            attempt = random_hex(12)
            claimed = await self.db.execute(
                files.update()
                .where(files.c.seq == row["seq"], files.c.attempt == row["attempt"], claimable)
                .values(attempt=attempt, lease_owner=self.owner, lease_until=now + self.lease_s))
            if claimed:
                return Job(row["vector_store_id"], row["file_id"], row["filename"], attempt, row["chunk_tokens"], row["overlap_tokens"],
                           model_of(row))
        return None

    def _mine(self, job: Job) -> sa.ColumnElement[bool]:
        return sa.and_(files.c.vector_store_id == job.vector_store_id, files.c.file_id == job.file_id, files.c.attempt == job.attempt,
                       files.c.status == "in_progress")

    async def run(self, job: Job) -> None:
        """Ingest one claimed file to its end: completed, failed, or given up (lease lost)."""
        work = asyncio.current_task()
        lost = False

        async def keep_lease() -> None:
            nonlocal lost
            while True:
                await asyncio.sleep(self.lease_s / 3)
                try:
                    renewed = await self.db.execute(files.update().where(self._mine(job)).values(lease_until=time.time() + self.lease_s))
                except StorageUnavailableError:
                    continue  # renewed at the next round the database answers
                if not renewed:
                    lost = True
                    if work is not None:
                        work.cancel()
                    return

        keeper = asyncio.get_running_loop().create_task(keep_lease())
        meter = self._meters.pop((job.vector_store_id, job.file_id), None)
        metered = meter_tokens(meter) if meter is not None else None
        try:
            await self._ingest(job)
        except _LeaseLost:
            await self._discard(job)
        except asyncio.CancelledError:
            if not lost or work is None:
                raise  # shutting down: the lease expires and the file is taken up again
            work.uncancel()
            await self._discard(job)
        except ExtractionError as error:
            await self._finish(job, "failed", {"code": error.code, "message": error.message}, 0)
        except EmbeddingError as error:
            await self._finish(job, "failed", {"code": "server_error", "message": error.message}, 0)
        except StorageUnavailableError:
            # The database, not the file: nothing is decided about it. Its lease lapses and it is
            # taken up again (here or by another replica) once the database answers.
            log.warning("ingesting %s into %s waits for the database: taken up again once it is back", job.file_id, job.vector_store_id)
        except Exception as error:
            log.exception("ingesting %s into %s failed", job.file_id, job.vector_store_id)
            await self._finish(job, "failed", {"code": "server_error", "message": f"The file could not be processed ({type(error).__name__})."}, 0)
        finally:
            if metered is not None:
                reset_meter(metered)
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            ended = self._ended.get((job.vector_store_id, job.file_id))
            if ended is not None:
                ended.set()

    async def _ingest(self, job: Job) -> None:
        # Rows of earlier attempts (a crash) go first: a file's rows are only ever its current attempt's.
        await self.db.execute(chunks.delete().where(chunks.c.vector_store_id == job.vector_store_id, chunks.c.file_id == job.file_id,
                                                    chunks.c.attempt != job.attempt))
        try:
            content = await self.files_api.file_content(job.file_id)
        except NotFoundError:
            raise ExtractionError("invalid_file", f"The file {job.file_id} no longer exists in the Files API.") from None
        position = 0
        usage = 0
        batch: list[dict[str, object]] = []
        async for text in chunk_text(text_pieces(content.chunks, job.filename), job.chunk_tokens, job.overlap_tokens):
            batch.append({"vector_store_id": job.vector_store_id, "file_id": job.file_id, "attempt": job.attempt, "position": position,
                          "text": text})
            position += 1
            usage += len(text.encode())
            if len(batch) >= INSERT_BATCH:
                await self._insert(job, batch)
                batch = []
        if batch:
            await self._insert(job, batch)
        if position == 0:
            raise ExtractionError("invalid_file", f"No text could be extracted from {job.filename}.")
        await self._finish(job, "completed", None, usage)

    async def _insert(self, job: Job, rows: list[dict[str, object]]) -> None:
        embedding = job.embedding
        vectors: list[list[float]] = []
        if embedding is not None:
            if self.inference is None:
                raise EmbeddingError(f"The store's embedding model '{embedding.model}' is not served: run.yaml configures no inference.")
            vectors = await embedding.embed(self.inference, [str(row["text"]) for row in rows])

        def write(conn: sa.Connection) -> None:
            if not conn.execute(files.update().where(self._mine(job)).values(lease_until=time.time() + self.lease_s)).rowcount:
                raise _LeaseLost()
            if embedding is None:
                conn.execute(chunks.insert(), rows)
                return
            seqs = conn.execute(chunks.insert().returning(chunks.c.seq, sort_by_parameter_order=True), rows).scalars().all()
            insert_vectors(conn, embedding.dimension, job.vector_store_id, seqs, vectors)

        await self.db.write(write)

    async def _finish(self, job: Job, status: str, error: dict[str, str] | None, usage: int) -> None:
        def write(conn: sa.Connection) -> None:
            done = conn.execute(files.update().where(self._mine(job)).values(
                status=status, last_error=error, usage_bytes=usage, lease_owner=None, lease_until=None)).rowcount
            if not done or status != "completed":
                conn.execute(chunks.delete().where(chunks.c.vector_store_id == job.vector_store_id, chunks.c.file_id == job.file_id,
                                                   chunks.c.attempt == job.attempt))

        await self.db.write(write)

    async def _discard(self, job: Job) -> None:
        await self.db.execute(chunks.delete().where(chunks.c.vector_store_id == job.vector_store_id, chunks.c.file_id == job.file_id,
                                                    chunks.c.attempt == job.attempt))

