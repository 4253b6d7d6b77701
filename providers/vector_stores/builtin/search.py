"""Keyword search over chunks, in the database's own full-text index, with attribute filters
translated into the same query (never applied after it, which would starve `max_num_results`).

A query first finds the chunks holding every one of its words, which the index answers from its
posting lists without ranking the whole corpus; only when those are too few does it widen to any
word (ranking every chunk that holds a common word is what makes keyword search slow at scale).

Candidates come in the engine's order (BM25 on SQLite's FTS5, ts_rank_cd on PostgreSQL); their
scores (`score`) are in [0, 1], as OpenAI's are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from providers.vector_stores.builtin.tables import chunks, files

__all__ = ["CANDIDATES", "KeywordQuery", "filter_clause", "keyword_query", "keyword_statement", "score"]

_TERM = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32
CANDIDATES = 300


@dataclass(frozen=True)
class KeywordQuery:
    terms: tuple[str, ...]
    every: bool = True
    """Chunks with every term (the first pass), or with any (the second, when the first finds too few)."""

    def fts5(self) -> str:
        """Each term quoted, so FTS5 syntax in a query is taken literally."""
        terms = (" AND " if self.every else " OR ").join(f'"{term}"' for term in self.terms)
        return f"text : ({terms})"

    def tsquery(self) -> str:
        return (" & " if self.every else " | ").join(self.terms)

    def widened(self) -> KeywordQuery | None:
        """The query that matches any of the terms, if it differs from this one."""
        return KeywordQuery(self.terms, every=False) if self.every and len(self.terms) > 1 else None


def keyword_query(text: str) -> KeywordQuery | None:
    terms = tuple(dict.fromkeys(term.lower() for term in _TERM.findall(text)))[:MAX_TERMS]
    return KeywordQuery(terms) if terms else None


def keyword_statement(dialect: str, query: KeywordQuery, store_ids: Sequence[str], filters: Mapping[str, Any] | None,
                      limit: int) -> sa.Select[Any]:
    """The best `limit` chunks of completed files of the stores, with the engine's relevance as
    `relevance` (higher is better), among the first `CANDIDATES` chunks that match and pass the
    filters (ranking every chunk that holds a common word is what makes keyword search slow at
    scale; the bound keeps a search's cost flat as a store grows)."""
    where = [files.c.status == "completed"]
    if filters is not None:
        where.append(filter_clause(dialect, filters))
    if dialect == "sqlite":
        return _sqlite_statement(query, store_ids, where, limit)
    return _postgres_statement(query, store_ids, where, limit)


def _sqlite_statement(query: KeywordQuery, store_ids: Sequence[str], where: list[sa.ColumnElement[bool]], limit: int) -> sa.Select[Any]:
    # The stores are tested on the full-text table's own copy of the id: with no condition on the
    # chunks for an index to serve, SQLite drives the join from the match (else it tests the match
    # chunk by chunk).
    fts = sa.table("vector_store_chunks_fts", sa.column("rowid"), sa.column("vector_store_id"))
    table: sa.ColumnElement[Any] = sa.literal_column("vector_store_chunks_fts")
    joined = chunks.join(files, sa.and_(files.c.vector_store_id == chunks.c.vector_store_id, files.c.file_id == chunks.c.file_id,
                                        files.c.attempt == chunks.c.attempt))
    candidates = (sa.select(chunks.c.vector_store_id, chunks.c.file_id, chunks.c.text, files.c.filename, files.c.attributes,
                            (-sa.func.bm25(table)).label("relevance"))
                  .select_from(fts.join(joined, chunks.c.seq == fts.c.rowid))
                  .where(table.op("MATCH")(query.fts5()), fts.c.vector_store_id.in_(list(store_ids)), *where)
                  .limit(CANDIDATES).subquery())
    return sa.select(candidates).order_by(candidates.c.relevance.desc()).limit(limit)


def _postgres_statement(query: KeywordQuery, store_ids: Sequence[str], where: list[sa.ColumnElement[bool]], limit: int) -> sa.Select[Any]:
    tsquery = sa.func.to_tsquery(sa.literal_column("'english'"), query.tsquery())
    tsv: sa.ColumnElement[Any] = sa.literal_column("vector_store_chunks.tsv")
    # Materialized, so the matches come from the GIN index (and are ranked) once, before the join:
    # left to itself the planner may test the match chunk by chunk of every file.
    matches = (sa.select(chunks.c.seq, chunks.c.vector_store_id, chunks.c.file_id, chunks.c.attempt, chunks.c.text,
                         sa.func.ts_rank(tsv, tsquery).label("relevance"))
               .where(tsv.op("@@")(tsquery), chunks.c.vector_store_id.in_(list(store_ids))).limit(CANDIDATES)
               .cte("matches").prefix_with("MATERIALIZED"))
    on_file = sa.and_(files.c.vector_store_id == matches.c.vector_store_id, files.c.file_id == matches.c.file_id,
                      files.c.attempt == matches.c.attempt)
    return (sa.select(matches.c.vector_store_id, matches.c.file_id, matches.c.text, files.c.filename, files.c.attributes,
                      matches.c.relevance)
            .select_from(matches.join(files, on_file)).where(*where).order_by(matches.c.relevance.desc()).limit(limit))


def score(query: KeywordQuery, text: str) -> float:
    """BM25's shape without its corpus statistics: half the share of the query's terms the chunk
    holds, half their frequency in it, saturated and normalised by its length. A chunk's score
    depends on the chunk and the query only, never on what other stores hold, so results are
    ranked the same whoever shares the database (the index's own rank only picks candidates)."""
    words = [word.lower() for word in _TERM.findall(text)]
    if not words:
        return 0.0
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    saturation = 1.2 * (0.25 + 0.75 * len(words) / 120)
    covered = 0
    frequency = 0.0
    for term in query.terms:
        stem = term[:max(4, len(term) - 2)]
        seen = counts.get(term) or sum(n for word, n in counts.items() if word.startswith(stem))
        if seen:
            covered += 1
            frequency += seen / (seen + saturation)
    return round(0.5 * covered / len(query.terms) + 0.5 * frequency / len(query.terms), 6)


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
