"""The built-in vector stores: stores, their files and batches, on the `vector_stores` store."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from providers.vector_stores.builtin import search as keyword
from providers.vector_stores.builtin.embedding import EmbeddingError, EmbeddingModel, Embeddings, model_columns, model_of, probe
from providers.vector_stores.builtin.ingest import Ingestor
from providers.vector_stores.builtin.tables import batches, columns, files, row_of, rows_of, stores
from providers.vector_stores.builtin.vectors import PgvectorMissing, ensure_vector_table, vector_statement
from runtime.apis.files.protocol import FilesProvider
from runtime.apis.vector_stores.models import CreateBatch, CreateStore, FileSpec, Search, UpdateStore
from runtime.apis.vector_stores.protocol import FILE_STATUSES, Page, SearchHit
from runtime.auth import principal_id
from runtime.errors import InvalidRequestError, NotFoundError, UpstreamError
from runtime.ids import random_hex
from runtime.quotas import token_meter
from runtime.storage import Database, InsertRows, Scoped, Sql, Table, in_list, insert_rows, loads, owner_condition

__all__ = ["BuiltinVectorStores"]

DAY_S = 86_400
ACTIVE_EVERY_S = 60  # last_active_at is written at most this often per store
VECTOR_CANDIDATES = 100  # nearest chunks fetched per query vector, before the files' filters
GONE_CHECK_BATCH = 200  # files whose existence a sweep checks with the Files API
DEFAULT_WEIGHTS = (0.5, 0.5)  # embedding, text: hybrid search's weights when the request gives none

# A store the caller may read (or update, delete): its owner is the caller's, or one the access
# policy grants (runtime.storage.Scoped).
_STORE = Scoped(f"SELECT {columns(stores)} FROM vector_stores WHERE id = :store_id{{owner}}", "principal")
_FILE = Sql(f"SELECT {columns(files)} FROM vector_store_files WHERE vector_store_id = :store_id AND file_id = :file_id")
_BATCH = Sql(f"SELECT {columns(batches)} FROM vector_store_file_batches WHERE id = :batch_id AND vector_store_id = :store_id")
_BATCH_COUNTS = Sql("SELECT status, count(*) FROM vector_store_files WHERE vector_store_id = :store_id AND batch_id = :batch_id "
                    "GROUP BY status")
_TOUCH = Sql("UPDATE vector_stores SET last_active_at = :now WHERE id = :store_id")
_DELETE_STORE = [Sql(f"DELETE FROM {name} WHERE {key} = :store_id") for name, key in (
    ("vector_store_chunks", "vector_store_id"), ("vector_store_files", "vector_store_id"),
    ("vector_store_file_batches", "vector_store_id"), ("vector_stores", "id"))]
# A file's rows in one store: its chunks (of every attempt), then the file.
_DETACH = [Sql(f"DELETE FROM {name} WHERE vector_store_id = :store_id AND file_id = :file_id")
           for name in ("vector_store_chunks", "vector_store_files")]
_SET_ATTRIBUTES = Sql("UPDATE vector_store_files SET attributes = :attributes WHERE vector_store_id = :store_id AND file_id = :file_id",
                      json=["attributes"])
_STORES_OF_FILE = Sql("SELECT vector_store_id FROM vector_store_files WHERE file_id = :file_id")
_FORGET_FILE = Sql("DELETE FROM vector_store_files WHERE file_id = :file_id")
_EXPIRED = Sql("SELECT DISTINCT file_id FROM vector_store_files WHERE file_expires_at <= :now")
_FILE_IDS = {
    False: Sql("SELECT DISTINCT file_id FROM vector_store_files ORDER BY file_id LIMIT :rows"),
    True: Sql("SELECT DISTINCT file_id FROM vector_store_files WHERE file_id > :after ORDER BY file_id LIMIT :rows"),
}
_CHUNK_TEXTS = Sql("SELECT text FROM vector_store_chunks WHERE vector_store_id = :store_id AND file_id = :file_id AND attempt = :attempt "
                   "ORDER BY position")
_CANCEL_BATCH = Sql("UPDATE vector_store_file_batches SET cancelled = :cancelled WHERE id = :batch_id")
_CANCEL_FILES = Sql("UPDATE vector_store_files SET status = 'cancelled', lease_owner = NULL, lease_until = NULL "
                    "WHERE vector_store_id = :store_id AND batch_id = :batch_id AND status = 'in_progress'")


class BuiltinVectorStores:
    """Implements runtime.apis.vector_stores.protocol.VectorStoresProvider."""

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

        file_rows = [_file_row(store_id, spec, file_object, now, None) for spec, file_object in zip(request.files, named, strict=True)]
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
        rows, has_more = await _page(self.db, stores, f"true{owner}", params, "id", page)
        counts = await self._counts([row["id"] for row in rows])
        return [_public_store(row, counts.get(row["id"], {})) for row in rows], has_more

    async def get_store(self, store_id: str) -> dict[str, Any]:
        row = await self._store(store_id)
        return _public_store(row, (await self._counts([store_id])).get(store_id, {}))

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
            for delete in _DELETE_STORE:
                delete.run(connection, {"store_id": store_id})

        await self.db.write(write)
        return {"id": store_id, "object": "vector_store.deleted", "deleted": True}

    async def _store(self, store_id: str, action: str = "read") -> Mapping[str, Any]:
        row = await self.db.read_one(*_STORE.for_caller({"store_id": store_id}, action))
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
                for delete in _DETACH:
                    delete.run(connection, {"store_id": store_id, "file_id": spec.file_id})
                insert_rows(connection, files, [_file_row(store_id, spec, file_object, now, batch_id)])
            _TOUCH.run(connection, {"store_id": store_id, "now": now})

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
        rows, has_more = await _page(self.db, files, where, params, "file_id", page, scope="vector_store_id = :store_id")
        return [_public_file(row) for row in rows], has_more

    async def get_file(self, store_id: str, file_id: str) -> dict[str, Any]:
        return _public_file(await self._file(store_id, file_id))

    async def _file(self, store_id: str, file_id: str, action: str = "read") -> Mapping[str, Any]:
        if principal_id() is not None:
            await self._store(store_id, action)  # another owner's store is not there, nor its files
        row = await self.db.read_one(_FILE, {"store_id": store_id, "file_id": file_id})
        if row is None:
            await self._store(store_id)
            raise NotFoundError(f"No file found with id '{file_id}' in vector store '{store_id}'.", param="file_id", code="not_found")
        return row_of(files, row)

    async def update_file(self, store_id: str, file_id: str, attributes: dict[str, Any] | None) -> dict[str, Any]:
        await self._file(store_id, file_id, "update")
        await self.db.write_one(_SET_ATTRIBUTES, {"store_id": store_id, "file_id": file_id, "attributes": attributes or {}})
        return await self.get_file(store_id, file_id)

    async def detach_file(self, store_id: str, file_id: str) -> dict[str, Any]:
        await self._file(store_id, file_id, "update")

        def write(connection: Any) -> None:
            for delete in _DETACH:
                delete.run(connection, {"store_id": store_id, "file_id": file_id})

        await self.db.write(write)
        return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}

    async def forget_file(self, file_id: str) -> None:
        def write(connection: Any) -> None:
            held = [store_id for store_id, in _STORES_OF_FILE.run(connection, {"file_id": file_id}).rows]
            if held:  # the chunks are found through their stores (the chunks' index starts with the store)
                listed, params = in_list("store", held)
                Sql(f"DELETE FROM vector_store_chunks WHERE vector_store_id IN {listed} AND file_id = :file_id").run(
                    connection, {**params, "file_id": file_id})
                _FORGET_FILE.run(connection, {"file_id": file_id})

        await self.db.write(write)

    async def forget_gone_files(self, checked: int = GONE_CHECK_BATCH) -> list[str]:
        """Take out of every store the files the Files API no longer serves, and return their ids:
        the expired ones (by the `expires_at` the file had when attached), and of the next
        `checked` files in turn, those the Files API answers 404 for (deleted while the stores were
        not told: a fault between the file's deletion and their `forget_file`, or a stack that
        served no vector stores then). Called periodically, outside any request: the server's own
        work, which sees every caller's files."""
        now = int(time.time())
        expired = [file_id for file_id, in await self.db.read_all(_EXPIRED, {"now": now})]
        after = self._checked_after
        params: dict[str, Any] = {"rows": checked} if after is None else {"rows": checked, "after": after}
        ids = [file_id for file_id, in await self.db.read_all(_FILE_IDS[after is not None], params)]
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
        rows = await self.db.read_all(_CHUNK_TEXTS, {"store_id": store_id, "file_id": file_id, "attempt": row["attempt"]})
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
        rows = await self.db.read_all(_BATCH_COUNTS, {"store_id": store_id, "batch_id": batch_id})
        counts = {status: int(count) for status, count in rows}
        status = "in_progress" if counts.get("in_progress") else "cancelled" if row["cancelled"] else "completed"
        return {"id": batch_id, "object": "vector_store.files_batch", "created_at": row["created_at"], "vector_store_id": store_id,
                "status": status, "file_counts": _file_counts(counts)}

    async def _batch(self, store_id: str, batch_id: str, action: str = "read") -> Mapping[str, Any]:
        if principal_id() is not None:
            await self._store(store_id, action)  # another owner's store is not there, nor its batches
        row = await self.db.read_one(_BATCH, {"batch_id": batch_id, "store_id": store_id})
        if row is None:
            await self._store(store_id)
            raise NotFoundError(f"No file batch found with id '{batch_id}' in vector store '{store_id}'.", param="batch_id", code="not_found")
        return row_of(batches, row)

    async def cancel_batch(self, store_id: str, batch_id: str) -> dict[str, Any]:
        await self._batch(store_id, batch_id, "update")

        def write(connection: Any) -> None:
            _CANCEL_BATCH.run(connection, {"batch_id": batch_id, "cancelled": True})
            # A worker on one of these files loses its lease at its next write and removes its rows.
            _CANCEL_FILES.run(connection, {"store_id": store_id, "batch_id": batch_id})

        await self.db.write(write)
        return await self.get_batch(store_id, batch_id)

    # --- search ----------------------------------------------------------------------------------

    async def search(self, store_ids: Sequence[str], request: Search) -> list[SearchHit]:
        if not store_ids:
            return []  # nothing to search (and no store to check)
        listed, params = in_list("store", list(store_ids))
        owner, granted = owner_condition("principal")
        query = Sql(f"SELECT {columns(stores)} FROM vector_stores WHERE id IN {listed}{owner}")
        found = {row["id"]: row for row in rows_of(stores, await self.db.read_all(query, {**params, **granted}))}
        now = int(time.time())
        for store_id in store_ids:
            row = found.get(store_id)
            if row is None:
                raise NotFoundError(f"No vector store found with id '{store_id}'.", param="vector_store_id", code="not_found")
            expires_at = _expires_at(row)
            if expires_at is not None and expires_at <= now:
                raise InvalidRequestError(f"Vector store '{store_id}' has expired.", param="vector_store_id", code="vector_store_expired")
        stale = [store_id for store_id in store_ids if found[store_id]["last_active_at"] < now - ACTIVE_EVERY_S]
        if stale:
            listed, params = in_list("store", stale)
            await self.db.write_one(Sql(f"UPDATE vector_stores SET last_active_at = :now WHERE id IN {listed}"), {**params, "now": now})
        models = {store_id: model_of(found[store_id]) for store_id in store_ids}
        if request.mode == "vector":
            bare = next((store_id for store_id, model in models.items() if model is None), None)
            if bare is not None:
                raise InvalidRequestError(f"Vector store '{bare}' has no embedding model, so it cannot be searched with search_mode "
                                          "'vector'; use 'keyword' or 'hybrid'.", param="search_mode", code="invalid_value")
        # Hybrid search fetches more of each kind than it returns: a chunk found by both rises above those found by one.
        fetch = min(request.max_num_results * 2, 50) if request.mode != "keyword" and any(models.values()) else request.max_num_results
        # The two halves run at once (each on a connection of its own): the search takes the longer one, not the sum.
        text_scores, vector_scores = await asyncio.gather(
            _nothing() if request.mode == "vector" else self._keyword_hits(store_ids, request, fetch),
            _nothing() if request.mode == "keyword" else self._vector_hits(models, request, fetch))
        embedding_weight, text_weight = _weights(request)
        fused: list[SearchHit] = []
        for key in {**text_scores, **vector_scores}:
            text_hit, vector_hit = text_scores.get(key), vector_scores.get(key)
            hit = text_hit or vector_hit
            assert hit is not None
            if models[hit.vector_store_id] is None or request.mode == "keyword":
                score = text_hit.score if text_hit else 0.0
            elif request.mode == "vector":
                score = vector_hit.score if vector_hit else 0.0
            else:
                score = (embedding_weight * (vector_hit.score if vector_hit else 0.0)
                         + text_weight * (text_hit.score if text_hit else 0.0)) / (embedding_weight + text_weight)
            score = round(score, 6)
            if score >= request.ranking.score_threshold and score > 0:
                fused.append(dataclasses.replace(hit, score=score))
        return sorted(fused, key=lambda hit: (-hit.score, hit.file_id, hit.text))[:request.max_num_results]

    async def _keyword_hits(self, store_ids: Sequence[str], request: Search, limit: int) -> dict[tuple[str, str, str], SearchHit]:
        best: dict[tuple[str, str, str], SearchHit] = {}
        for text in request.queries:
            query = keyword.keyword_query(text)
            # All the words first; any of them only when that finds too few.
            matched = 0
            while query is not None and matched < limit:
                rows = await self.db.read_all(*keyword.keyword_statement(self.db.dialect, query, store_ids, request.filters, limit))
                matched = len(rows)
                for store_id, file_id, text, filename, attributes, _ in rows:
                    hit = SearchHit(store_id, file_id, filename, keyword.score(query, text), text, loads(attributes) or {})
                    key = (hit.vector_store_id, hit.file_id, hit.text)
                    if key not in best or best[key].score < hit.score:
                        best[key] = hit
                query = query.widened()
        return best

    async def _vector_hits(self, models: Mapping[str, EmbeddingModel | None], request: Search,
                           limit: int) -> dict[tuple[str, str, str], SearchHit]:
        """The nearest chunks to each query, by cosine similarity (clamped at 0), per model."""
        groups: dict[EmbeddingModel, list[str]] = {}
        for store_id, model in models.items():
            if model is not None:
                groups.setdefault(model, []).append(store_id)
        best: dict[tuple[str, str, str], SearchHit] = {}
        for model, group in groups.items():
            if self.inference is None:
                raise UpstreamError(f"The embedding model '{model.model}' of vector store '{group[0]}' is not served here.",
                                    code="upstream_error")
            try:
                vectors = await model.embed(self.inference, request.queries)
            except EmbeddingError as error:
                raise UpstreamError(error.message, code="upstream_error") from None
            for vector in vectors:
                statement, params = vector_statement(self.db.dialect, model.dimension, vector, group, request.filters, limit,
                                                     max(VECTOR_CANDIDATES, limit * 2))
                for store_id, file_id, text, filename, attributes, relevance in await self._nearest(
                        statement, params, max(VECTOR_CANDIDATES, limit * 2)):
                    hit = SearchHit(store_id, file_id, filename, max(0.0, float(relevance)), text, loads(attributes) or {})
                    key = (hit.vector_store_id, hit.file_id, hit.text)
                    if key not in best or best[key].score < hit.score:
                        best[key] = hit
        return best

    async def _nearest(self, statement: Sql, params: Mapping[str, Any], candidates: int) -> list[tuple[Any, ...]]:
        if self.db.dialect != "postgresql":
            return await self.db.read_all(statement, params)
        ef_search = Sql(f"SET LOCAL hnsw.ef_search = {min(1000, int(candidates))}")

        def run(connection: Any) -> list[tuple[Any, ...]]:
            # HNSW gives at most ef_search neighbours (40 by default): as many as are asked for.
            ef_search.run(connection)
            return statement.run(connection, params).rows

        return await self.db.read_with(run, transaction=True)  # (SET LOCAL holds only within a transaction)


async def _nothing() -> dict[tuple[str, str, str], SearchHit]:
    return {}


def _weights(request: Search) -> tuple[float, float]:
    ranking = request.ranking
    if ranking.embedding_weight is None or ranking.text_weight is None:
        return DEFAULT_WEIGHTS
    return ranking.embedding_weight, ranking.text_weight


def _file_row(store_id: str, spec: FileSpec, file_object: Mapping[str, Any], now: int, batch_id: str | None) -> dict[str, Any]:
    expires_at = file_object.get("expires_at")
    return {"vector_store_id": store_id, "file_id": spec.file_id, "filename": str(file_object["filename"]), "created_at": now,
            "status": "in_progress", "last_error": None, "usage_bytes": 0, "attributes": spec.attributes or {},
            "chunk_tokens": spec.chunking.max_tokens, "overlap_tokens": spec.chunking.overlap_tokens, "batch_id": batch_id,
            "attempt": random_hex(12), "lease_owner": None, "lease_until": None,
            "file_expires_at": expires_at if isinstance(expires_at, int) else None}


async def _page(db: Database, table: Table, where: str, params: Mapping[str, Any], id_column: str, page: Page,
                scope: str | None = None) -> tuple[list[dict[str, Any]], bool]:
    """A cursor page by insertion order (`seq`): after/before an id of the same scope. `where` and
    `scope` are conditions on `table` (with `params`); `id_column` is the column the cursors name."""
    query = f"SELECT {columns(table)} FROM {table.name} WHERE {where}"
    values = dict(params)
    ascending = page.order == "asc"
    for name, cursor, later in (("after", page.after, ascending), ("before", page.before, not ascending)):
        if cursor is not None:
            anchor = f"(SELECT seq FROM {table.name} WHERE {id_column} = :{name}{f' AND {scope}' if scope is not None else ''})"
            query += f" AND seq {'>' if later else '<'} {anchor}"
            values[name] = cursor
    query += f" ORDER BY seq {'ASC' if ascending else 'DESC'} LIMIT :rows"
    rows = await db.read_all(Sql(query), {**values, "rows": page.limit + 1})
    return rows_of(table, rows[:page.limit]), len(rows) > page.limit


def _file_counts(counts: Mapping[str, int]) -> dict[str, int]:
    by_status = {status: int(counts.get(status, 0)) for status in FILE_STATUSES}
    return {**by_status, "total": sum(by_status.values())}


def _expires_at(row: Any) -> int | None:
    days = row["expires_after_days"]
    return int(row["last_active_at"]) + int(days) * DAY_S if days else None


def _public_store(row: Any, counts: Mapping[str, int]) -> dict[str, Any]:
    expires_at = _expires_at(row)
    status = ("expired" if expires_at is not None and expires_at <= time.time()
              else "in_progress" if counts.get("in_progress") else "completed")
    return {"id": row["id"], "object": "vector_store", "created_at": row["created_at"], "name": row["name"],
            "description": row["description"], "usage_bytes": int(counts.get("usage_bytes", 0)), "file_counts": _file_counts(counts),
            "status": status, "expires_after": {"anchor": "last_active_at", "days": row["expires_after_days"]} if row["expires_after_days"] else None,
            "expires_at": expires_at, "last_active_at": row["last_active_at"], "metadata": row["metadata"] or {}}


def _public_file(row: Any) -> dict[str, Any]:
    return {"id": row["file_id"], "object": "vector_store.file", "created_at": row["created_at"], "vector_store_id": row["vector_store_id"],
            "status": row["status"], "last_error": row["last_error"], "usage_bytes": row["usage_bytes"],
            "attributes": row["attributes"] or {},
            "chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": row["chunk_tokens"],
                                                                "chunk_overlap_tokens": row["overlap_tokens"]}}}
