"""The tables of the built-in vector stores, and the full-text index each database keeps itself.

A chunk row is written by one ingestion attempt (`attempt`); a file's chunks are those of its
current attempt, and only a `completed` file's chunks are searched, so a half-ingested file (a
crash, a cancel) is never seen and its rows are removed by the next attempt.

Keyword search is the database's own: an FTS5 table over the chunks on SQLite (kept by
triggers), a generated `tsvector` column with a GIN index on PostgreSQL. Vectors are in tables
of their own, one per size (see vectors.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.storage import (
    BIGINT, BOOLEAN, FLOAT, INTEGER, JSON, TEXT, Column, Database, Index, Sql, String, Table, Unique, loads, table,
)

__all__ = ["TABLES", "batches", "chunks", "columns", "create_tables", "files", "row_of", "rows_of", "stores"]

stores = table(
    "vector_stores",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("created_at", BIGINT, nullable=False),
    Column("name", TEXT),
    Column("description", TEXT),
    Column("metadata", JSON),
    Column("expires_after_days", INTEGER),
    Column("last_active_at", BIGINT, nullable=False),
    # The model that embeds the store's chunks and the size of its vectors; none: keyword search only.
    Column("embedding_model", TEXT),
    Column("embedding_dimension", INTEGER),
    Column("embedding_sends_dimension", BOOLEAN),  # the size is asked of the model (`dimensions`)
    # Who made it (runtime.security.auth): with auth on, only they reach it, its files and its search. Null when auth was off.
    Column("principal", String(160)),
    Index("ix_vector_stores_principal", ("principal", "seq")),
)

files = table(
    "vector_store_files",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("vector_store_id", String(64), nullable=False),
    Column("file_id", String(64), nullable=False),
    Column("filename", TEXT, nullable=False),
    Column("created_at", BIGINT, nullable=False),
    Column("status", String(16), nullable=False),
    Column("last_error", JSON),
    Column("usage_bytes", BIGINT, nullable=False, default=0),
    Column("attributes", JSON),
    Column("chunk_tokens", INTEGER, nullable=False),
    Column("overlap_tokens", INTEGER, nullable=False),
    Column("batch_id", String(64), index=True),
    Column("attempt", String(32), nullable=False),
    Column("lease_owner", String(160)),
    Column("lease_until", FLOAT),
    # When the Files API's file expires (its `expires_at`): the file then leaves every store.
    Column("file_expires_at", BIGINT, index=True),
    Unique("uq_vector_store_files_store_file", ("vector_store_id", "file_id")),
    Index("ix_vector_store_files_jobs", ("status", "lease_until")),
    Index("ix_vector_store_files_file", ("file_id",)),  # a file's stores, when it leaves them all
)

batches = table(
    "vector_store_file_batches",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("vector_store_id", String(64), nullable=False, index=True),
    Column("created_at", BIGINT, nullable=False),
    Column("cancelled", BOOLEAN, nullable=False, default=False),
)

chunks = table(
    "vector_store_chunks",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("vector_store_id", String(64), nullable=False),
    Column("file_id", String(64), nullable=False),
    Column("attempt", String(32), nullable=False),
    Column("position", INTEGER, nullable=False),
    Column("text", TEXT, nullable=False),
    Index("ix_vector_store_chunks_file", ("vector_store_id", "file_id", "attempt", "position")),
)

TABLES = (stores, files, batches, chunks)


def columns(declared: Table) -> str:
    """The select list of every column of `declared`, in order: JSON columns as their text
    (`CAST(... AS TEXT)`), decoded by `row_of`."""
    return ", ".join(f"CAST({column.name} AS TEXT)" if column.kind.json else column.name for column in declared.columns)


def row_of(declared: Table, row: Sequence[Any]) -> dict[str, Any]:
    """A row selected by `columns(declared)` as a mapping by column name: JSON columns decoded,
    BOOLEAN ones as bool (SQLite gives 0 or 1), NULL as None."""
    found: dict[str, Any] = {}
    for column, value in zip(declared.columns, row, strict=True):
        if column.kind.json:
            value = loads(value)
        elif column.kind == BOOLEAN and value is not None:
            value = bool(value)
        found[column.name] = value
    return found


def rows_of(declared: Table, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """`row_of` each of `rows`."""
    return [row_of(declared, row) for row in rows]


_SQLITE_FTS = (
    # The store's id is kept (not indexed) beside the text: a match is tested against it without a
    # lookup of the chunk, and the chunk is read only for the matches of the stores searched.
    "CREATE VIRTUAL TABLE IF NOT EXISTS vector_store_chunks_fts USING fts5(text, vector_store_id UNINDEXED, content='vector_store_chunks', "
    "content_rowid='seq', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS vector_store_chunks_fts_insert AFTER INSERT ON vector_store_chunks BEGIN "
    "INSERT INTO vector_store_chunks_fts(rowid, text, vector_store_id) VALUES (new.seq, new.text, new.vector_store_id); END",
    "CREATE TRIGGER IF NOT EXISTS vector_store_chunks_fts_delete AFTER DELETE ON vector_store_chunks BEGIN "
    "INSERT INTO vector_store_chunks_fts(vector_store_chunks_fts, rowid, text, vector_store_id) "
    "VALUES ('delete', old.seq, old.text, old.vector_store_id); END",
)

_POSTGRES_FTS = (
    "ALTER TABLE vector_store_chunks ADD COLUMN IF NOT EXISTS tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED",
    "CREATE INDEX IF NOT EXISTS ix_vector_store_chunks_tsv ON vector_store_chunks USING GIN (tsv)",
)


async def create_tables(db: Database) -> None:
    await db.create_tables(TABLES)
    statements = [Sql(text) for text in (_SQLITE_FTS if db.dialect == "sqlite" else _POSTGRES_FTS)]

    def run(connection: Any) -> None:
        for statement in statements:
            statement.run(connection)

    await db.change_schema(run)
