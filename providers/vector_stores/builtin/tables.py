"""The tables of the built-in vector stores, and the full-text index each database keeps itself.

A chunk row is written by one ingestion attempt (`attempt`); a file's chunks are those of its
current attempt, and only a `completed` file's chunks are searched, so a half-ingested file (a
crash, a cancel) is never seen and its rows are removed by the next attempt.

Keyword search is the database's own: an FTS5 table over the chunks on SQLite (kept by
triggers), a generated `tsvector` column with a GIN index on PostgreSQL. Vectors are in tables
of their own, one per size (see vectors.py).
"""

from __future__ import annotations

import sqlalchemy as sa

from runtime.storage import Database, json_type, schema_lock

__all__ = ["batches", "chunks", "create_tables", "files", "metadata", "stores"]

metadata = sa.MetaData()

stores = sa.Table(
    "vector_stores",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("description", sa.Text, nullable=True),
    sa.Column("metadata", json_type(), nullable=True),
    sa.Column("expires_after_days", sa.Integer, nullable=True),
    sa.Column("last_active_at", sa.BigInteger, nullable=False),
    # The model that embeds the store's chunks and the size of its vectors; none: keyword search only.
    sa.Column("embedding_model", sa.Text, nullable=True),
    sa.Column("embedding_dimension", sa.Integer, nullable=True),
    sa.Column("embedding_sends_dimension", sa.Boolean, nullable=True),  # the size is asked of the model (`dimensions`)
    # Who made it (runtime.auth): with auth on, only they reach it, its files and its search. Null when auth was off.
    sa.Column("principal", sa.String(160), nullable=True),
    sa.Index("ix_vector_stores_principal", "principal", "seq"),
)

files = sa.Table(
    "vector_store_files",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("vector_store_id", sa.String(64), nullable=False),
    sa.Column("file_id", sa.String(64), nullable=False),
    sa.Column("filename", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("last_error", json_type(), nullable=True),
    sa.Column("usage_bytes", sa.BigInteger, nullable=False, default=0),
    sa.Column("attributes", json_type(), nullable=True),
    sa.Column("chunk_tokens", sa.Integer, nullable=False),
    sa.Column("overlap_tokens", sa.Integer, nullable=False),
    sa.Column("batch_id", sa.String(64), nullable=True, index=True),
    sa.Column("attempt", sa.String(32), nullable=False),
    sa.Column("lease_owner", sa.String(160), nullable=True),
    sa.Column("lease_until", sa.Float, nullable=True),
    # When the Files API's file expires (its `expires_at`): the file then leaves every store.
    sa.Column("file_expires_at", sa.BigInteger, nullable=True, index=True),
    sa.UniqueConstraint("vector_store_id", "file_id", name="uq_vector_store_files_store_file"),
    sa.Index("ix_vector_store_files_jobs", "status", "lease_until"),
    sa.Index("ix_vector_store_files_file", "file_id"),  # a file's stores, when it leaves them all
)

batches = sa.Table(
    "vector_store_file_batches",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(64), nullable=False, unique=True),
    sa.Column("vector_store_id", sa.String(64), nullable=False, index=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("cancelled", sa.Boolean, nullable=False, default=False),
)

chunks = sa.Table(
    "vector_store_chunks",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("vector_store_id", sa.String(64), nullable=False),
    sa.Column("file_id", sa.String(64), nullable=False),
    sa.Column("attempt", sa.String(32), nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Index("ix_vector_store_chunks_file", "vector_store_id", "file_id", "attempt", "position"),
)

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
    await db.create_tables(metadata)
    statements = _SQLITE_FTS if db.dialect == "sqlite" else _POSTGRES_FTS

    def run(conn: sa.Connection) -> None:
        schema_lock(conn)
        for statement in statements:
            conn.exec_driver_sql(statement)

    await db.write(run)
