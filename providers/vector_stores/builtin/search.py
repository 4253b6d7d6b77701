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

from runtime.storage import Sql, in_list

__all__ = ["CANDIDATES", "HIT_COLUMNS", "ON_FILE", "KeywordQuery", "filter_clause", "keyword_query", "keyword_statement", "score", "searched_files"]

_TERM = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32
CANDIDATES = 300

HIT_COLUMNS = ("vector_store_id", "file_id", "text", "filename", "attributes", "relevance")
"""The columns of a search statement's rows, in order: `attributes` is the file's as JSON text."""


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


# A chunk's file: the row of the same store, file and ingestion attempt.
ON_FILE = ("vector_store_files.vector_store_id = {chunk}.vector_store_id AND vector_store_files.file_id = {chunk}.file_id "
           "AND vector_store_files.attempt = {chunk}.attempt")


def searched_files(dialect: str, filters: Mapping[str, Any] | None, params: dict[str, Any]) -> str:
    """The condition on `vector_store_files` of the chunks a search may find: the file is
    completed, and passes `filters` (its parameters added to `params`)."""
    params["completed"] = "completed"
    condition = "vector_store_files.status = :completed" + ("::VARCHAR" if dialect == "postgresql" else "")
    if filters is not None:
        condition += " AND " + filter_clause(dialect, filters, params)
    return condition


def keyword_statement(dialect: str, query: KeywordQuery, store_ids: Sequence[str], filters: Mapping[str, Any] | None,
                      limit: int) -> tuple[Sql, dict[str, Any]]:
    """The best `limit` chunks of completed files of the stores, with the engine's relevance as
    `relevance` (higher is better), among the first `CANDIDATES` chunks that match and pass the
    filters (ranking every chunk that holds a common word is what makes keyword search slow at
    scale; the bound keeps a search's cost flat as a store grows). Its rows hold `HIT_COLUMNS`."""
    if not store_ids:
        raise ValueError("a keyword search needs at least one store")
    stores, params = in_list("store", list(store_ids))
    params.update(candidates=CANDIDATES, limit=limit)
    where = searched_files(dialect, filters, params)
    if dialect == "sqlite":
        params["match"] = query.fts5()
        return _sqlite_statement(stores, where), params
    params["tsquery"] = query.tsquery()
    return _postgres_statement(stores, where), params


def _sqlite_statement(stores: str, where: str) -> Sql:
    # The stores are tested on the full-text table's own copy of the id: with no condition on the
    # chunks for an index to serve, SQLite drives the join from the match (else it tests the match
    # chunk by chunk).
    return Sql(
        "SELECT vector_store_id, file_id, text, filename, attributes, relevance FROM ("
        "SELECT vector_store_chunks.vector_store_id AS vector_store_id, vector_store_chunks.file_id AS file_id, "
        "vector_store_chunks.text AS text, vector_store_files.filename AS filename, "
        "CAST(vector_store_files.attributes AS TEXT) AS attributes, -bm25(vector_store_chunks_fts) AS relevance "
        "FROM vector_store_chunks_fts JOIN (vector_store_chunks JOIN vector_store_files ON "
        f"{ON_FILE.format(chunk='vector_store_chunks')}) ON vector_store_chunks.seq = vector_store_chunks_fts.rowid "
        f"WHERE (vector_store_chunks_fts MATCH :match) AND vector_store_chunks_fts.vector_store_id IN {stores} AND {where} "
        "LIMIT :candidates) AS candidates ORDER BY relevance DESC LIMIT :limit")


def _postgres_statement(stores: str, where: str) -> Sql:
    # Materialized, so the matches come from the GIN index (and are ranked) once, before the join:
    # left to itself the planner may test the match chunk by chunk of every file.
    tsquery = "to_tsquery('english', :tsquery::VARCHAR)"
    return Sql(
        "WITH matches AS MATERIALIZED (SELECT vector_store_chunks.seq AS seq, vector_store_chunks.vector_store_id AS vector_store_id, "
        "vector_store_chunks.file_id AS file_id, vector_store_chunks.attempt AS attempt, vector_store_chunks.text AS text, "
        f"ts_rank(vector_store_chunks.tsv, {tsquery}) AS relevance FROM vector_store_chunks "
        f"WHERE (vector_store_chunks.tsv @@ {tsquery}) AND vector_store_chunks.vector_store_id IN {stores} LIMIT :candidates::INTEGER) "
        "SELECT matches.vector_store_id, matches.file_id, matches.text, vector_store_files.filename, "
        "CAST(vector_store_files.attributes AS TEXT), matches.relevance "
        f"FROM matches JOIN vector_store_files ON {ON_FILE.format(chunk='matches')} "
        f"WHERE {where} ORDER BY matches.relevance DESC LIMIT :limit::INTEGER")


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
#
# Written as SQLAlchemy wrote the expressions they were first declared with: a key and every value
# compared are bound parameters (on PostgreSQL with the type SQLAlchemy's asyncpg dialect gave them:
# VARCHAR, INTEGER, BIGINT or FLOAT), booleans compared are literals (1 and 0 on SQLite), and a condition is
# made true or false on SQLite as SQLAlchemy makes one there (`coalesce(..., 0) = 1`).

_ATTRIBUTES = "vector_store_files.attributes"
_COMPARED = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def filter_clause(dialect: str, spec: Mapping[str, Any], params: dict[str, Any]) -> str:
    """A checked filter (contract.vector_stores.models.check_filter) as a condition on the
    file's attributes (`vector_store_files.attributes`), its parameters added to `params`. A
    comparison with an attribute the file lacks (or holds with another type) is false, except `ne`
    and `nin`, which it satisfies."""
    kind = spec["type"]
    if kind in ("and", "or"):
        parts = [filter_clause(dialect, inner, params) for inner in spec["filters"]]
        return "(" + (" AND " if kind == "and" else " OR ").join(parts) + ")"
    key, value = spec["key"], spec["value"]
    if kind in ("in", "nin"):
        found = "(" + " OR ".join(_equals(dialect, key, item, params) for item in value) + ")"
        return found if kind == "in" else _false_unless(dialect, found, negated=True)
    if kind == "eq":
        return _false_unless(dialect, _equals(dialect, key, value, params))
    if kind == "ne":
        return _false_unless(dialect, _equals(dialect, key, value, params), negated=True)
    number = _typed(dialect, key, "number", params)
    return _false_unless(dialect, f"{number} {_COMPARED[kind]} {_bind(dialect, value, params)}")


def _false_unless(dialect: str, condition: str, *, negated: bool = False) -> str:
    """`coalesce(condition, false)`, or its negation: NULL (an attribute missing) is false."""
    if dialect == "postgresql":
        return f"{'NOT ' if negated else ''}coalesce({condition}, false)"
    return f"coalesce({condition}, 0) = {0 if negated else 1}"


def _equals(dialect: str, key: str, value: Any, params: dict[str, Any]) -> str:
    kind = "boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else "string"
    typed = _typed(dialect, key, kind, params)
    if isinstance(value, bool):
        literal = ("true" if value else "false") if dialect == "postgresql" else ("1" if value else "0")
        return f"{typed} = {literal}"
    return f"{typed} = {_bind(dialect, value, params)}"


def _bind(dialect: str, value: Any, params: dict[str, Any]) -> str:
    """A bound parameter for `value`, typed on PostgreSQL as SQLAlchemy typed it."""
    name = f"filter_{len(params)}"
    while name in params:
        name += "_"
    params[name] = value
    if dialect != "postgresql":
        return f":{name}"
    if isinstance(value, str):
        cast = "VARCHAR"
    elif isinstance(value, int):
        cast = "BIGINT" if value.bit_length() >= 32 else "INTEGER"  # as SQLAlchemy chooses for a literal integer
    else:
        cast = "FLOAT"
    return f":{name}::{cast}"


def _typed(dialect: str, key: str, kind: str, params: dict[str, Any]) -> str:
    """The attribute's value when it has this JSON type, else NULL (never a failed cast)."""
    if dialect == "postgresql":
        field = f"{_ATTRIBUTES} -> {_bind(dialect, key, params)}"
        text = f"{_ATTRIBUTES} ->> {_bind(dialect, key, params)}"
        value = {"number": f"CAST({text} AS FLOAT)", "string": text, "boolean": f"({text}) = 'true'"}[kind]
        return f"CASE WHEN (jsonb_typeof({field}) = '{kind}') THEN {value} ELSE NULL END"
    path = _bind(dialect, '$."' + key.replace('"', '""') + '"', params)
    json_type = f"json_type({_ATTRIBUTES}, {path})"
    extracted = f"json_extract({_ATTRIBUTES}, {path})"
    if kind == "number":
        return f"CASE WHEN ({json_type} IN ('integer', 'real')) THEN {extracted} ELSE NULL END"
    if kind == "string":
        return f"CASE WHEN ({json_type} = 'text') THEN {extracted} ELSE NULL END"
    return f"CASE WHEN ({json_type} IN ('true', 'false')) THEN {json_type} = 'true' ELSE NULL END"
