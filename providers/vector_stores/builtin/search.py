"""Keyword search over chunks, in the database's own full-text index, with attribute filters
translated into the same query (never applied after it, which would starve `max_num_results`).

Scores are in [0, 1], as OpenAI's are: half the share of the query's terms the chunk holds, half
the engine's relevance squashed into [0, 1) (BM25 on SQLite's FTS5, ts_rank_cd on PostgreSQL).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from providers.vector_stores.builtin.tables import chunks, files

__all__ = ["KeywordQuery", "filter_clause", "keyword_query", "keyword_statement", "score"]

_TERM = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32


@dataclass(frozen=True)
class KeywordQuery:
    terms: tuple[str, ...]

    def fts5(self) -> str:
        """Any of the terms (each quoted: FTS5 syntax in a query is taken literally)."""
        return " OR ".join(f'"{term}"' for term in self.terms)

    def tsquery(self) -> str:
        return " | ".join(self.terms)


def keyword_query(text: str) -> KeywordQuery | None:
    terms = tuple(dict.fromkeys(term.lower() for term in _TERM.findall(text)))[:MAX_TERMS]
    return KeywordQuery(terms) if terms else None


def keyword_statement(dialect: str, query: KeywordQuery, store_ids: Sequence[str], filters: Mapping[str, Any] | None,
                      limit: int) -> sa.Select[Any]:
    """The best `limit` chunks of completed files of the stores, with the engine's relevance as
    `relevance` (higher is better)."""
    joined = chunks.join(files, sa.and_(files.c.vector_store_id == chunks.c.vector_store_id, files.c.file_id == chunks.c.file_id,
                                        files.c.attempt == chunks.c.attempt))
    columns = [chunks.c.vector_store_id, chunks.c.file_id, chunks.c.text, files.c.filename, files.c.attributes]
    where = [chunks.c.vector_store_id.in_(list(store_ids)), files.c.status == "completed"]
    if filters is not None:
        where.append(filter_clause(dialect, filters))
    if dialect == "sqlite":
        fts = sa.table("vector_store_chunks_fts", sa.column("rowid"))
        match = sa.literal_column("vector_store_chunks_fts").op("MATCH")(query.fts5())
        bm25 = sa.func.bm25(sa.literal_column("vector_store_chunks_fts"))
        return (sa.select(*columns, (-bm25).label("relevance"))
                .select_from(fts.join(joined, chunks.c.seq == fts.c.rowid))
                .where(match, *where).order_by(bm25).limit(limit))
    tsquery = sa.func.to_tsquery(sa.literal_column("'english'"), query.tsquery())
    tsv: sa.ColumnElement[Any] = sa.literal_column("vector_store_chunks.tsv")
    rank = sa.func.ts_rank_cd(tsv, tsquery)
    return (sa.select(*columns, rank.label("relevance")).select_from(joined)
            .where(tsv.op("@@")(tsquery), *where).order_by(rank.desc()).limit(limit))


def score(query: KeywordQuery, text: str, relevance: float) -> float:
    words = {word.lower() for word in _TERM.findall(text)}
    covered = sum(1 for term in query.terms if term in words or any(word.startswith(term[:max(4, len(term) - 2)]) for word in words))
    relevance = max(0.0, float(relevance))
    return round(0.5 * covered / len(query.terms) + 0.5 * relevance / (relevance + 1.0), 6)


# --- filters -----------------------------------------------------------------------------------


def filter_clause(dialect: str, spec: Mapping[str, Any]) -> sa.ColumnElement[bool]:
    """A checked filter (runtime.apis.vector_stores.models.check_filter) as a WHERE clause on the
    file's attributes. A comparison with an attribute the file lacks (or holds with another
    type) is false, except `ne` and `nin`, which it satisfies."""
    kind = spec["type"]
    if kind in ("and", "or"):
        parts = [filter_clause(dialect, inner) for inner in spec["filters"]]
        return sa.and_(*parts) if kind == "and" else sa.or_(*parts)
    key, value = spec["key"], spec["value"]
    if kind in ("in", "nin"):
        found = sa.or_(*[_equals(dialect, key, item) for item in value])
        return found if kind == "in" else sa.not_(sa.func.coalesce(found, sa.false()))
    if kind == "eq":
        return sa.func.coalesce(_equals(dialect, key, value), sa.false())
    if kind == "ne":
        return sa.not_(sa.func.coalesce(_equals(dialect, key, value), sa.false()))
    number = _typed(dialect, key, "number")
    compared: sa.ColumnElement[bool] = {"gt": number > value, "gte": number >= value, "lt": number < value, "lte": number <= value}[kind]
    return sa.func.coalesce(compared, sa.false())


def _equals(dialect: str, key: str, value: Any) -> sa.ColumnElement[bool]:
    kind = "boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else "string"
    equal: sa.ColumnElement[bool] = _typed(dialect, key, kind) == value
    return equal


def _typed(dialect: str, key: str, kind: str) -> sa.ColumnElement[Any]:
    """The attribute's value when it has this JSON type, else NULL (never a failed cast)."""
    column = files.c.attributes
    if dialect == "postgresql":
        field = sa.literal_column("vector_store_files.attributes").op("->")(sa.literal(key))
        text = sa.literal_column("vector_store_files.attributes").op("->>")(sa.literal(key))
        value: Any = {"number": sa.cast(text, sa.Float), "string": text, "boolean": text == "true"}[kind]
        return sa.case((sa.func.jsonb_typeof(field) == kind, value), else_=sa.null())
    path = '$."' + key.replace('"', '""') + '"'
    json_type = sa.func.json_type(column, path)
    extracted = sa.func.json_extract(column, path)
    if kind == "number":
        return sa.case((json_type.in_(("integer", "real")), extracted), else_=sa.null())
    if kind == "string":
        return sa.case((json_type == "text", extracted), else_=sa.null())
    return sa.case((json_type.in_(("true", "false")), json_type == "true"), else_=sa.null())
