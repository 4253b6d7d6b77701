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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from providers.vector_stores.builtin.chunking import chunk_text
from providers.vector_stores.builtin.embedding import EmbeddingError, EmbeddingModel, Embeddings, model_of
from providers.vector_stores.builtin.extract import ExtractionError, text_pieces
from providers.vector_stores.builtin.tables import chunks
from providers.vector_stores.builtin.vectors import insert_vectors
from contract.files.protocol import FilesProvider
from contract.errors import NotFoundError
from contract.ids import random_hex
from runtime.storage.owners import owner_is_gone, process_owner
from runtime.security.quotas import TokenMeter, meter_tokens, reset_meter
from runtime.storage import Database, Sql, StorageUnavailableError, insert_rows

__all__ = ["Ingestor", "Job", "insert_chunks"]

log = logging.getLogger("stack")

INSERT_BATCH = 64

# The files whose worker holds a lease that has not expired (for `start`), and the release of one.
_LEASED = Sql("SELECT seq, attempt, lease_owner FROM vector_store_files WHERE status = 'in_progress' AND lease_owner IS NOT NULL "
              "AND lease_until >= :now")
_RELEASE = Sql("UPDATE vector_store_files SET lease_until = NULL WHERE seq = :seq AND attempt = :attempt AND status = 'in_progress'")
_GIVE_UP = Sql("UPDATE vector_store_files SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = :owner AND status = 'in_progress'")
# A file no worker holds (or whose worker's lease lapsed).
_CLAIMABLE = ("vector_store_files.status = 'in_progress' "
              "AND (vector_store_files.lease_until IS NULL OR vector_store_files.lease_until < :now)")
_CANDIDATES = Sql(
    "SELECT vector_store_files.seq, vector_store_files.attempt, vector_store_files.vector_store_id, vector_store_files.file_id, "
    "vector_store_files.filename, vector_store_files.chunk_tokens, vector_store_files.overlap_tokens, vector_stores.embedding_model, "
    "vector_stores.embedding_dimension, vector_stores.embedding_sends_dimension "
    "FROM vector_store_files JOIN vector_stores ON vector_stores.id = vector_store_files.vector_store_id "
    f"WHERE {_CLAIMABLE} ORDER BY vector_store_files.seq LIMIT 8")
_CLAIM = Sql("UPDATE vector_store_files SET attempt = :new_attempt, lease_owner = :owner, lease_until = :until "
             f"WHERE vector_store_files.seq = :seq AND vector_store_files.attempt = :attempt AND {_CLAIMABLE}")
# A job's file, while its worker holds it: every write of the worker is conditioned on it.
_MINE = "vector_store_id = :vector_store_id AND file_id = :file_id AND attempt = :attempt AND status = 'in_progress'"
_RENEW = Sql(f"UPDATE vector_store_files SET lease_until = :until WHERE {_MINE}")
_FINISH = Sql("UPDATE vector_store_files SET status = :status, last_error = :last_error, usage_bytes = :usage_bytes, "
              f"lease_owner = NULL, lease_until = NULL WHERE {_MINE}", json=["last_error"])
_EARLIER_ATTEMPTS = Sql("DELETE FROM vector_store_chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id "
                        "AND attempt != :attempt")
_ATTEMPT_CHUNKS = Sql("DELETE FROM vector_store_chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id "
                      "AND attempt = :attempt")


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
        runtime.storage.owners), then start the workers, which take them up at once."""
        rows = await self.db.read_all(_LEASED, {"now": time.time()})
        for seq, attempt, lease_owner in rows:
            if owner_is_gone(lease_owner):
                await self.db.write_one(_RELEASE, {"seq": seq, "attempt": attempt})
        self._tasks = [asyncio.get_running_loop().create_task(self._work()) for _ in range(self._workers)]

    async def stop(self) -> None:
        """Stop working, and give up the leases of the files under way: they are taken up again
        at once by another replica, or by the next start."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        try:
            await self.db.write_one(_GIVE_UP, {"owner": self.owner})
        except Exception:  # the database is gone too: the leases lapse instead
            log.exception("could not give up the ingestion leases of this process")

    def wake(self, attached: Iterable[tuple[str, str]] = (), meter: TokenMeter | None = None) -> None:
        """Files were `attached` (store id, file id): take them up; their embeddings count against
        `meter` (the attaching request's token quota, `runtime.security.quotas.token_meter()`), if any. The
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
        candidates = await self.db.read_all(_CANDIDATES, {"now": now})
        for (seq, old_attempt, store_id, file_id, filename, chunk_tokens, overlap_tokens, embedding_model, embedding_dimension,
             embedding_sends_dimension) in candidates:
            attempt = random_hex(12)
            claimed = await self.db.write_one(_CLAIM, {"seq": seq, "attempt": old_attempt, "now": now, "new_attempt": attempt,
                                                       "owner": self.owner, "until": now + self.lease_s})
            if claimed:
                model = model_of({"embedding_model": embedding_model, "embedding_dimension": embedding_dimension,
                                  "embedding_sends_dimension": embedding_sends_dimension})
                return Job(store_id, file_id, filename, attempt, chunk_tokens, overlap_tokens, model)
        return None

    @staticmethod
    def _mine(job: Job) -> dict[str, Any]:
        """The parameters of `_MINE`: the job's file, while its worker holds it."""
        return {"vector_store_id": job.vector_store_id, "file_id": job.file_id, "attempt": job.attempt}

    async def run(self, job: Job) -> None:
        """Ingest one claimed file to its end: completed, failed, or given up (lease lost)."""
        work = asyncio.current_task()
        lost = False

        async def keep_lease() -> None:
            nonlocal lost
            while True:
                await asyncio.sleep(self.lease_s / 3)
                try:
                    renewed = await self.db.write_one(_RENEW, {**self._mine(job), "until": time.time() + self.lease_s})
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
        await self.db.write_one(_EARLIER_ATTEMPTS, self._mine(job))
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

        dialect = self.db.dialect

        def write(connection: Any) -> None:
            if not _RENEW.run(connection, {**self._mine(job), "until": time.time() + self.lease_s}).rowcount:
                raise _LeaseLost()
            if embedding is None:
                insert_rows(connection, chunks, rows)
                return
            insert_vectors(connection, dialect, embedding.dimension, job.vector_store_id, insert_chunks(connection, rows), vectors)

        await self.db.write(write)

    async def _finish(self, job: Job, status: str, error: dict[str, str] | None, usage: int) -> None:
        def write(connection: Any) -> None:
            done = _FINISH.run(connection, {**self._mine(job), "status": status, "last_error": error, "usage_bytes": usage}).rowcount
            if not done or status != "completed":
                _ATTEMPT_CHUNKS.run(connection, self._mine(job))

        await self.db.write(write)

    async def _discard(self, job: Job) -> None:
        await self.db.write_one(_ATTEMPT_CHUNKS, self._mine(job))


def insert_chunks(connection: Any, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Insert the chunks `rows` of one file's attempt (each with its own `position`) as one
    statement; the `seq` each was given, in the order of `rows`."""
    if not rows:
        return []
    first = rows[0]
    if any((row["vector_store_id"], row["file_id"], row["attempt"]) != (first["vector_store_id"], first["file_id"], first["attempt"])
           for row in rows):
        raise ValueError("insert_chunks takes the chunks of one file's attempt")
    params: dict[str, Any] = {"vector_store_id": first["vector_store_id"], "file_id": first["file_id"], "attempt": first["attempt"]}
    values = []
    for index, row in enumerate(rows):
        params[f"position_{index}"], params[f"text_{index}"] = row["position"], row["text"]
        values.append(f"(:vector_store_id, :file_id, :attempt, :position_{index}, :text_{index})")
    # RETURNING gives no order: each seq is matched to its row by the row's position (one per chunk).
    returned = Sql(f"INSERT INTO vector_store_chunks (vector_store_id, file_id, attempt, position, text) VALUES {', '.join(values)} "
                   "RETURNING position, seq").run(connection, params).rows
    seq_of = dict(returned)
    if len(seq_of) != len(rows):
        raise ValueError("insert_chunks takes chunks of distinct positions")
    return [int(seq_of[row["position"]]) for row in rows]

