"""A search of vector stores (`search_stores`): by keyword (search.py), by vector (vectors.py), or
hybrid, both halves at once and their scores fused by the request's weights. The stores are
checked first (the caller's, not expired), and marked active."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from contract.errors import InvalidRequestError, NotFoundError, UpstreamError
from contract.vector_stores.models import Search
from contract.vector_stores.protocol import SearchHit
import providers.vector_stores.builtin.search as keyword
from providers.vector_stores.builtin.embedding import EmbeddingError, EmbeddingModel, Embeddings, model_of
from providers.vector_stores.builtin.records import expires_at
from providers.vector_stores.builtin.tables import columns, rows_of, stores
from providers.vector_stores.builtin.vectors import vector_statement
from runtime.storage import Database, Sql, in_list, loads, owner_condition

__all__ = ["ACTIVE_EVERY_S", "DEFAULT_WEIGHTS", "VECTOR_CANDIDATES", "search_stores"]

ACTIVE_EVERY_S = 60  # last_active_at is written at most this often per store
VECTOR_CANDIDATES = 100  # nearest chunks fetched per query vector, before the files' filters
DEFAULT_WEIGHTS = (0.5, 0.5)  # embedding, text: hybrid search's weights when the request gives none

Hits = dict[tuple[str, str, str], SearchHit]
"""The best hit of each chunk, by (store, file, text)."""


async def search_stores(db: Database, inference: Embeddings | None, store_ids: Sequence[str], request: Search) -> list[SearchHit]:
    """The best `max_num_results` chunks of the stores for the request's queries, best first."""
    if not store_ids:
        return []  # nothing to search (and no store to check)
    models = await _searched_stores(db, store_ids)
    if request.mode == "vector":
        bare = next((store_id for store_id, model in models.items() if model is None), None)
        if bare is not None:
            raise InvalidRequestError(f"Vector store '{bare}' has no embedding model, so it cannot be searched with search_mode "
                                      "'vector'; use 'keyword' or 'hybrid'.", param="search_mode", code="invalid_value")
    # Hybrid search fetches more of each kind than it returns: a chunk found by both rises above those found by one.
    fetch = min(request.max_num_results * 2, 50) if request.mode != "keyword" and any(models.values()) else request.max_num_results
    # The two halves run at once (each on a connection of its own): the search takes the longer one, not the sum.
    text_scores, vector_scores = await asyncio.gather(
        _nothing() if request.mode == "vector" else _keyword_hits(db, store_ids, request, fetch),
        _nothing() if request.mode == "keyword" else _vector_hits(db, inference, models, request, fetch))
    return _fused(models, request, text_scores, vector_scores)


async def _searched_stores(db: Database, store_ids: Sequence[str]) -> dict[str, EmbeddingModel | None]:
    """Each store's embedding model (None: keyword search only), once every store is found to be
    the caller's and not expired; those not marked active for a while are marked now."""
    listed, params = in_list("store", list(store_ids))
    owner, granted = owner_condition("principal")
    query = Sql(f"SELECT {columns(stores)} FROM vector_stores WHERE id IN {listed}{owner}")
    found = {row["id"]: row for row in rows_of(stores, await db.read_all(query, {**params, **granted}))}
    now = int(time.time())
    for store_id in store_ids:
        row = found.get(store_id)
        if row is None:
            raise NotFoundError(f"No vector store found with id '{store_id}'.", param="vector_store_id", code="not_found")
        expires = expires_at(row)
        if expires is not None and expires <= now:
            raise InvalidRequestError(f"Vector store '{store_id}' has expired.", param="vector_store_id", code="vector_store_expired")
    stale = [store_id for store_id in store_ids if found[store_id]["last_active_at"] < now - ACTIVE_EVERY_S]
    if stale:
        listed, params = in_list("store", stale)
        await db.write_one(Sql(f"UPDATE vector_stores SET last_active_at = :now WHERE id IN {listed}"), {**params, "now": now})
    return {store_id: model_of(found[store_id]) for store_id in store_ids}


def _fused(models: Mapping[str, EmbeddingModel | None], request: Search, text_scores: Hits, vector_scores: Hits) -> list[SearchHit]:
    """Each chunk's score by the request's mode (a store without a model: its text score), above
    the threshold, best first."""
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


async def _keyword_hits(db: Database, store_ids: Sequence[str], request: Search, limit: int) -> Hits:
    best: Hits = {}
    for text in request.queries:
        query = keyword.keyword_query(text)
        # All the words first; any of them only when that finds too few.
        matched = 0
        while query is not None and matched < limit:
            rows = await db.read_all(*keyword.keyword_statement(db.dialect, query, store_ids, request.filters, limit))
            matched = len(rows)
            for store_id, file_id, text, filename, attributes, _ in rows:
                hit = SearchHit(store_id, file_id, filename, keyword.score(query, text), text, loads(attributes) or {})
                key = (hit.vector_store_id, hit.file_id, hit.text)
                if key not in best or best[key].score < hit.score:
                    best[key] = hit
            query = query.widened()
    return best


async def _vector_hits(db: Database, inference: Embeddings | None, models: Mapping[str, EmbeddingModel | None], request: Search,
                       limit: int) -> Hits:
    """The nearest chunks to each query, by cosine similarity (clamped at 0), per model."""
    groups: dict[EmbeddingModel, list[str]] = {}
    for store_id, model in models.items():
        if model is not None:
            groups.setdefault(model, []).append(store_id)
    best: Hits = {}
    for model, group in groups.items():
        if inference is None:
            raise UpstreamError(f"The embedding model '{model.model}' of vector store '{group[0]}' is not served here.",
                                code="upstream_error")
        try:
            vectors = await model.embed(inference, request.queries)
        except EmbeddingError as error:
            raise UpstreamError(error.message, code="upstream_error") from None
        for vector in vectors:
            statement, params = vector_statement(db.dialect, model.dimension, vector, group, request.filters, limit,
                                                 max(VECTOR_CANDIDATES, limit * 2))
            for store_id, file_id, text, filename, attributes, relevance in await _nearest(
                    db, statement, params, max(VECTOR_CANDIDATES, limit * 2)):
                hit = SearchHit(store_id, file_id, filename, max(0.0, float(relevance)), text, loads(attributes) or {})
                key = (hit.vector_store_id, hit.file_id, hit.text)
                if key not in best or best[key].score < hit.score:
                    best[key] = hit
    return best


async def _nearest(db: Database, statement: Sql, params: Mapping[str, Any], candidates: int) -> list[tuple[Any, ...]]:
    if db.dialect != "postgresql":
        return await db.read_all(statement, params)
    ef_search = Sql(f"SET LOCAL hnsw.ef_search = {min(1000, int(candidates))}")

    def run(connection: Any) -> list[tuple[Any, ...]]:
        # HNSW gives at most ef_search neighbours (40 by default): as many as are asked for.
        ef_search.run(connection)
        return statement.run(connection, params).rows

    return await db.read_with(run, transaction=True)  # (SET LOCAL holds only within a transaction)


async def _nothing() -> Hits:
    return {}


def _weights(request: Search) -> tuple[float, float]:
    ranking = request.ranking
    if ranking.embedding_weight is None or ranking.text_weight is None:
        return DEFAULT_WEIGHTS
    return ranking.embedding_weight, ranking.text_weight
