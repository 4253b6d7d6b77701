"""The built-in vector stores service: stores, their files and batches, on the `vector_stores`
store. Its SQL is in statements.py, its rows' shapes in records.py; a file's ingestion is the
Ingestor's (ingest.py), a search is hybrid.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from contract.errors import InvalidRequestError, NotFoundError
from contract.files.protocol import FilesProvider
from contract.ids import random_hex
from contract.vector_stores.models import CreateBatch, CreateStore, FileSpec, Search, UpdateStore
from contract.vector_stores.protocol import Page, SearchHit
from providers.vector_stores.builtin.embedding import EmbeddingModel, Embeddings, model_columns, probe
from providers.vector_stores.builtin.hybrid import search_stores
from providers.vector_stores.builtin.ingest import Ingestor
from providers.vector_stores.builtin.records import file_counts, file_row, public_file, public_store
from providers.vector_stores.builtin.statements import (
    BATCH, BATCH_COUNTS, CANCEL_BATCH, CANCEL_FILES, CHUNK_TEXTS, DELETE_STORE, DETACH, EXPIRED, FILE, FILE_IDS, FORGET_FILE,
    SET_ATTRIBUTES, STORE, STORES_OF_FILE, TOUCH, read_page)
from providers.vector_stores.builtin.tables import batches, files, row_of, stores
from providers.vector_stores.builtin.vectors import PgvectorMissing, ensure_vector_table
from contract.caller import principal_id
from runtime.security.quotas import token_meter
from runtime.storage import Database, InsertRows, Sql, in_list, insert_rows, owner_condition

__all__ = ["BuiltinVectorStores"]

GONE_CHECK_BATCH = 200  # files whose existence a sweep checks with the Files API


class BuiltinVectorStores:
    """Implements contract.vector_stores.protocol.VectorStoresProvider."""

    def __init__(self, db: Database, files_api: FilesProvider, ingestor: Ingestor, inference: Embeddings | None = None,
                 embedding_model: str | None = None, embedding_dimension: int | None = None, attach_wait_s: float = 0.0) -> None:
        self.db = db
        self.attach_wait_s = attach_wait_s
        self.files_api = files_api
        self.ingestor = ingestor
        self.inference = inference
        self.embedding_model = embedding_model
        self.embedding_dimension = embedding_dimension
        self._probed: dict[tuple[str, int | None], EmbeddingModel] = {}
        self._checked_after: str | None = None

    # --- stores ----------------------------------------------------------------------------------

    async def create_store(self, request: CreateStore) -> dict[str, Any]:
        named = await self._file_objects(request.files)
        embedding = await self._embedding_model(request)
        now = int(time.time())
        store_id = f"vs_{random_hex(16)}"
        row = {"id": store_id, "created_at": now, "name": request.name, "description": request.description,
               "metadata": request.metadata or {}, "expires_after_days": request.expires_after_days, "last_active_at": now,
               "principal": principal_id(), **model_columns(embedding)}

        file_rows = [file_row(store_id, spec, file_object, now, None) for spec, file_object in zip(request.files, named, strict=True)]
        await self.db.write(InsertRows((stores, [row]), (files, file_rows)))
        if request.files:
            attached = [(store_id, spec.file_id) for spec in request.files]
            self.ingestor.wake(attached, token_meter())
            await self.ingestor.settle(attached, self.attach_wait_s)
        return await self.get_store(store_id)

    async def _embedding_model(self, request: CreateStore) -> EmbeddingModel | None:
        """The store's model (its own, else the provider's default), checked once per process
        by embedding a text, with its vector table ready; None: keyword search only."""
        model = request.embedding_model or self.embedding_model
        if model is None:
            return None
        dimension = request.embedding_dimension if request.embedding_model else self.embedding_dimension
        if self.inference is None:
            raise InvalidRequestError("Invalid 'embedding_model': no inference provider is configured to embed with.",
                                      param="embedding_model", code="invalid_value")
        key = (model, dimension)
        embedding = self._probed.get(key)
        if embedding is None:
            embedding = await probe(self.inference, model, dimension)
            try:
                await ensure_vector_table(self.db, embedding.dimension)
            except PgvectorMissing as missing:
                raise InvalidRequestError(str(missing), param="embedding_model", code="invalid_value") from None
            self._probed[key] = embedding
        return embedding

    async def list_stores(self, page: Page) -> tuple[list[dict[str, Any]], bool]:
        owner, params = owner_condition("principal")
        rows, has_more = await read_page(self.db, stores, f"true{owner}", params, "id", page)
        counts = await self._counts([row["id"] for row in rows])
        return [public_store(row, counts.get(row["id"], {})) for row in rows], has_more

    async def get_store(self, store_id: str) -> dict[str, Any]:
        row = await self._store(store_id)
        return public_store(row, (await self._counts([store_id])).get(store_id, {}))

    async def update_store(self, store_id: str, request: UpdateStore) -> dict[str, Any]:
        await self._store(store_id, "update")
        values = dict(request.fields)
        if "metadata" in values and values["metadata"] is None:
            values["metadata"] = {}
        if values:
            values["last_active_at"] = int(time.time())
            unknown = [name for name in values if name not in stores.by_name or name in ("seq", "id")]
            if unknown:
                raise ValueError(f"not a field of a vector store: {unknown[0]!r}")
            assignments = ", ".join(f"{name} = :{name}" for name in values)
            json = [name for name in values if stores.by_name[name].kind.json]
            await self.db.write_one(Sql(f"UPDATE vector_stores SET {assignments} WHERE id = :store_id", json=json),
                                    {**values, "store_id": store_id})
        return await self.get_store(store_id)

    async def delete_store(self, store_id: str) -> dict[str, Any]:
        await self._store(store_id, "delete")

        def write(connection: Any) -> None:
            for delete in DELETE_STORE:
                delete.run(connection, {"store_id": store_id})

        await self.db.write(write)
        return {"id": store_id, "object": "vector_store.deleted", "deleted": True}

    async def _store(self, store_id: str, action: str = "read") -> Mapping[str, Any]:
        row = await self.db.read_one(*STORE.for_caller({"store_id": store_id}, action))
        if row is None:
            raise NotFoundError(f"No vector store found with id '{store_id}'.", param="vector_store_id", code="not_found")
        return row_of(stores, row)

    async def _counts(self, store_ids: list[str]) -> dict[str, dict[str, int]]:
        """Per store: files by status, and the bytes of the completed ones."""
        if not store_ids:
            return {}
        listed, params = in_list("store", store_ids)
        query = Sql("SELECT vector_store_id, status, count(*), sum(usage_bytes) FROM vector_store_files "
                    f"WHERE vector_store_id IN {listed} GROUP BY vector_store_id, status")
        counts: dict[str, dict[str, int]] = {}
        for store_id, status, count, usage_bytes in await self.db.read_all(query, params):
            entry = counts.setdefault(store_id, {})
            entry[status] = int(count)
            entry["usage_bytes"] = entry.get("usage_bytes", 0) + int(usage_bytes or 0)
        return counts

    # --- files -----------------------------------------------------------------------------------

    async def _file_objects(self, specs: Sequence[FileSpec]) -> list[dict[str, Any]]:
        """Each file's FileObject, from the Files API (an unknown file is a 404, before anything is written)."""
        return list(await asyncio.gather(*(self.files_api.get_file(spec.file_id) for spec in specs)))

    async def attach_file(self, store_id: str, spec: FileSpec) -> dict[str, Any]:
        await self._store(store_id, "update")
        await self._attach(store_id, [spec], await self._file_objects([spec]), None)
        return await self.get_file(store_id, spec.file_id)

    async def _attach(self, store_id: str, specs: Sequence[FileSpec], objects: Sequence[Mapping[str, Any]], batch_id: str | None,
                      batch_row: Mapping[str, Any] | None = None) -> None:
        now = int(time.time())

        def write(connection: Any) -> None:
            if batch_row is not None:
                insert_rows(connection, batches, [batch_row])
            for spec, file_object in zip(specs, objects, strict=True):
                # Attaching again starts over: the old attempt's chunks go, the new attempt writes its own.
                for delete in DETACH:
                    delete.run(connection, {"store_id": store_id, "file_id": spec.file_id})
                insert_rows(connection, files, [file_row(store_id, spec, file_object, now, batch_id)])
            TOUCH.run(connection, {"store_id": store_id, "now": now})

        await self.db.write(write)
        attached = [(store_id, spec.file_id) for spec in specs]
        self.ingestor.wake(attached, token_meter())
        await self.ingestor.settle(attached, self.attach_wait_s)

    async def list_files(self, store_id: str, status: str | None, page: Page, batch_id: str | None = None) -> tuple[list[dict[str, Any]], bool]:
        await self._store(store_id)
        if batch_id is not None:
            await self._batch(store_id, batch_id)
        where = "vector_store_id = :store_id"
        params: dict[str, Any] = {"store_id": store_id}
        if status is not None:
            where += " AND status = :status"
            params["status"] = status
        if batch_id is not None:
            where += " AND batch_id = :batch_id"
            params["batch_id"] = batch_id
        rows, has_more = await read_page(self.db, files, where, params, "file_id", page, scope="vector_store_id = :store_id")
        return [public_file(row) for row in rows], has_more

    async def get_file(self, store_id: str, file_id: str) -> dict[str, Any]:
        return public_file(await self._file(store_id, file_id))

    async def _file(self, store_id: str, file_id: str, action: str = "read") -> Mapping[str, Any]:
        if principal_id() is not None:
            await self._store(store_id, action)  # another owner's store is not there, nor its files
        row = await self.db.read_one(FILE, {"store_id": store_id, "file_id": file_id})
        if row is None:
            await self._store(store_id)
            raise NotFoundError(f"No file found with id '{file_id}' in vector store '{store_id}'.", param="file_id", code="not_found")
        return row_of(files, row)

    async def update_file(self, store_id: str, file_id: str, attributes: dict[str, Any] | None) -> dict[str, Any]:
        await self._file(store_id, file_id, "update")
        await self.db.write_one(SET_ATTRIBUTES, {"store_id": store_id, "file_id": file_id, "attributes": attributes or {}})
        return await self.get_file(store_id, file_id)

    async def detach_file(self, store_id: str, file_id: str) -> dict[str, Any]:
        await self._file(store_id, file_id, "update")

        def write(connection: Any) -> None:
            for delete in DETACH:
                delete.run(connection, {"store_id": store_id, "file_id": file_id})

        await self.db.write(write)
        return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}

    async def forget_file(self, file_id: str) -> None:
        def write(connection: Any) -> None:
            held = [store_id for store_id, in STORES_OF_FILE.run(connection, {"file_id": file_id}).rows]
            if held:  # the chunks are found through their stores (the chunks' index starts with the store)
                listed, params = in_list("store", held)
                Sql(f"DELETE FROM vector_store_chunks WHERE vector_store_id IN {listed} AND file_id = :file_id").run(
                    connection, {**params, "file_id": file_id})
                FORGET_FILE.run(connection, {"file_id": file_id})

        await self.db.write(write)

    async def forget_gone_files(self, checked: int = GONE_CHECK_BATCH) -> list[str]:
        """Take out of every store the files the Files API no longer serves, and return their ids:
        the expired ones (by the `expires_at` the file had when attached), and of the next
        `checked` files in turn, those the Files API answers 404 for (deleted while the stores were
        not told: a fault between the file's deletion and their `forget_file`, or a stack that
        served no vector stores then). Called periodically, outside any request: the server's own
        work, which sees every caller's files."""
        now = int(time.time())
        expired = [file_id for file_id, in await self.db.read_all(EXPIRED, {"now": now})]
        after = self._checked_after
        params: dict[str, Any] = {"rows": checked} if after is None else {"rows": checked, "after": after}
        ids = [file_id for file_id, in await self.db.read_all(FILE_IDS[after is not None], params)]
        self._checked_after = ids[-1] if len(ids) == checked else None  # the next call goes on from here, or starts over
        gone = []
        for file_id in ids:
            if file_id in expired:
                continue
            try:
                await self.files_api.get_file(file_id)
            except NotFoundError:
                gone.append(file_id)
        for file_id in expired + gone:
            await self.forget_file(file_id)
        return expired + gone

    async def file_content(self, store_id: str, file_id: str) -> list[str]:
        row = await self._file(store_id, file_id)
        rows = await self.db.read_all(CHUNK_TEXTS, {"store_id": store_id, "file_id": file_id, "attempt": row["attempt"]})
        return [text for text, in rows] if row["status"] == "completed" else []

    # --- batches ---------------------------------------------------------------------------------

    async def create_batch(self, store_id: str, request: CreateBatch) -> dict[str, Any]:
        await self._store(store_id, "update")
        objects = await self._file_objects(request.files)
        batch_id = f"vsfb_{random_hex(16)}"
        batch = {"id": batch_id, "vector_store_id": store_id, "created_at": int(time.time()), "cancelled": False}
        await self._attach(store_id, request.files, objects, batch_id, batch)
        return await self.get_batch(store_id, batch_id)

    async def get_batch(self, store_id: str, batch_id: str) -> dict[str, Any]:
        row = await self._batch(store_id, batch_id)
        rows = await self.db.read_all(BATCH_COUNTS, {"store_id": store_id, "batch_id": batch_id})
        counts = {status: int(count) for status, count in rows}
        status = "in_progress" if counts.get("in_progress") else "cancelled" if row["cancelled"] else "completed"
        return {"id": batch_id, "object": "vector_store.files_batch", "created_at": row["created_at"], "vector_store_id": store_id,
                "status": status, "file_counts": file_counts(counts)}

    async def _batch(self, store_id: str, batch_id: str, action: str = "read") -> Mapping[str, Any]:
        if principal_id() is not None:
            await self._store(store_id, action)  # another owner's store is not there, nor its batches
        row = await self.db.read_one(BATCH, {"batch_id": batch_id, "store_id": store_id})
        if row is None:
            await self._store(store_id)
            raise NotFoundError(f"No file batch found with id '{batch_id}' in vector store '{store_id}'.", param="batch_id", code="not_found")
        return row_of(batches, row)

    async def cancel_batch(self, store_id: str, batch_id: str) -> dict[str, Any]:
        await self._batch(store_id, batch_id, "update")

        def write(connection: Any) -> None:
            CANCEL_BATCH.run(connection, {"batch_id": batch_id, "cancelled": True})
            # A worker on one of these files loses its lease at its next write and removes its rows.
            CANCEL_FILES.run(connection, {"store_id": store_id, "batch_id": batch_id})

        await self.db.write(write)
        return await self.get_batch(store_id, batch_id)

    # --- search ----------------------------------------------------------------------------------

    async def search(self, store_ids: Sequence[str], request: Search) -> list[SearchHit]:
        return await search_stores(self.db, self.inference, store_ids, request)
