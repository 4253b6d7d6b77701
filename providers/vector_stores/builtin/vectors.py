"""Chunk vectors in the configured database, one table per vector size, searched by the
database's own vector index: sqlite-vec's `vec0` on SQLite (exact search over the store's
partition), pgvector's HNSW index on PostgreSQL (approximate, far faster on large stores).

A vector row has its chunk's `seq` as its key and goes when the chunk goes (a trigger on SQLite,
a cascading foreign key on PostgreSQL), so every path that removes chunks removes their vectors.
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence
from typing import Any

from providers.vector_stores.builtin.search import ON_FILE, searched_files
from runtime.storage import Database, Sql, StorageUnavailableError, in_list, sqlstate

__all__ = ["HNSW_MAX_DIMENSION", "PgvectorMissing", "ensure_vector_table", "insert_vectors", "require_pgvector", "vector_statement"]

HNSW_MAX_DIMENSION = 2000  # pgvector indexes `vector` columns up to this size; larger ones are searched exactly

PGVECTOR_HELP = ("The PostgreSQL server has no pgvector extension, which vector stores with an embedding model need. Install it "
                 "on the server (Debian/Ubuntu: `apt install postgresql-<version>-pgvector`; or the pgvector/pgvector container "
                 "image; or a PostgreSQL that ships it, such as the `pgserver` package), or remove `embedding_model` from the "
                 "vector_stores provider's config to search by keyword only.")

_CREATE_EXTENSION = Sql("CREATE EXTENSION IF NOT EXISTS vector")


class PgvectorMissing(RuntimeError):
    def __init__(self, detail: str) -> None:
        super().__init__(f"{PGVECTOR_HELP} ({detail})")


def table_name(dimension: int) -> str:
    return f"vector_store_vectors_{int(dimension)}"


async def require_pgvector(db: Database) -> None:
    """Make sure the pgvector extension is there (creating it if the role may); PgvectorMissing if not."""
    if db.dialect != "postgresql":
        return
    try:
        await db.change_schema(_CREATE_EXTENSION.run)
    except StorageUnavailableError:
        raise  # the database cannot serve: nothing is known of pgvector
    except Exception as error:
        if sqlstate(error) is None:
            raise  # not the database's refusal
        raise PgvectorMissing(str(getattr(error, "orig", None) or error).splitlines()[0]) from None


async def ensure_vector_table(db: Database, dimension: int) -> None:
    """Create the table (and index) for vectors of this size if it does not exist yet."""
    name = table_name(dimension)
    if db.dialect == "sqlite":
        statements = [
            # The store's id is a partition key: a search scans only the stores it names.
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0(vector_store_id text partition key, "
            f"embedding float[{int(dimension)}] distance_metric=cosine)",
            f"CREATE TRIGGER IF NOT EXISTS {name}_delete AFTER DELETE ON vector_store_chunks BEGIN "
            f"DELETE FROM {name} WHERE rowid = old.seq; END",
        ]
    else:
        await require_pgvector(db)
        statements = [
            f"CREATE TABLE IF NOT EXISTS {name} (seq INTEGER PRIMARY KEY REFERENCES vector_store_chunks(seq) ON DELETE CASCADE, "
            f"vector_store_id VARCHAR(64) NOT NULL, embedding vector({int(dimension)}) NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS ix_{name}_store ON {name} (vector_store_id)",
        ]
        if dimension <= HNSW_MAX_DIMENSION:
            statements.append(f"CREATE INDEX IF NOT EXISTS ix_{name}_hnsw ON {name} USING hnsw (embedding vector_cosine_ops)")
    made = [Sql(statement) for statement in statements]

    def run(connection: Any) -> None:
        for statement in made:
            statement.run(connection)

    await db.change_schema(run)  # (an HNSW index over many rows takes longer than any request's statement)


def _literal(dialect: str, vector: Sequence[float]) -> Any:
    if dialect == "sqlite":
        return array.array("f", vector).tobytes()  # sqlite-vec's float32 blob
    return "[" + ",".join(repr(float(value)) for value in vector) + "]"


def _insert_sql(dialect: str, dimension: int) -> Sql:
    if dialect == "sqlite":
        return Sql(f"INSERT INTO {table_name(dimension)} (rowid, vector_store_id, embedding) VALUES (:seq, :store, :embedding)")
    return Sql(f"INSERT INTO {table_name(dimension)} (seq, vector_store_id, embedding) VALUES (:seq, :store, CAST(:embedding AS vector))")


def insert_vectors(connection: Any, dialect: str, dimension: int, store_id: str, seqs: Sequence[int],
                   vectors: Sequence[Sequence[float]]) -> None:
    """Write the vectors of the chunks `seqs` (in the caller's transaction, on `connection` of a
    database of `dialect`)."""
    _insert_sql(dialect, dimension).run(connection, [{"seq": seq, "store": store_id, "embedding": _literal(dialect, vector)}
                                                     for seq, vector in zip(seqs, vectors, strict=True)])


def vector_statement(dialect: str, dimension: int, vector: Sequence[float], store_ids: Sequence[str],
                     filters: Mapping[str, Any] | None, limit: int, candidates: int) -> tuple[Sql, dict[str, Any]]:
    """The `limit` chunks of completed files of the stores nearest to `vector` (among the
    `candidates` nearest chunks), with their cosine similarity as `relevance`; its rows hold
    search.HIT_COLUMNS. Attribute filters go into the nearest-neighbour search itself on SQLite
    (only matching chunks are scanned); on PostgreSQL they apply to the index's candidates."""
    if not store_ids:
        raise ValueError("a vector search needs at least one store")
    table = table_name(dimension)
    stores, params = in_list("store", list(store_ids))
    params.update(query=_literal(dialect, vector), candidates=candidates, limit=limit)
    where = searched_files(dialect, filters, params)
    if dialect == "sqlite":
        conditions = f"({table}.embedding MATCH :query) AND {table}.k = :candidates AND {table}.vector_store_id IN {stores}"
        if filters is not None:
            conditions += (f" AND {table}.rowid IN (SELECT vector_store_chunks.seq FROM vector_store_chunks JOIN vector_store_files ON "
                           f"{ON_FILE.format(chunk='vector_store_chunks')} WHERE vector_store_chunks.vector_store_id IN {stores} "
                           f"AND {where})")
        nearest = f"WITH nearest AS (SELECT {table}.rowid AS seq, {table}.distance AS distance FROM {table} WHERE {conditions}) "
        limit_text = ":limit"
    else:
        nearest = (f"WITH nearest AS MATERIALIZED (SELECT {table}.seq AS seq, "
                   f"{table}.embedding <=> CAST(:query::VARCHAR AS vector) AS distance FROM {table} "
                   f"WHERE {table}.vector_store_id IN {stores} ORDER BY distance LIMIT :candidates::INTEGER) ")
        limit_text = ":limit::INTEGER"
    return Sql(
        nearest + "SELECT vector_store_chunks.vector_store_id, vector_store_chunks.file_id, vector_store_chunks.text, "
        "vector_store_files.filename, CAST(vector_store_files.attributes AS TEXT), 1.0 - nearest.distance AS relevance "
        "FROM nearest JOIN vector_store_chunks ON vector_store_chunks.seq = nearest.seq "
        f"JOIN vector_store_files ON {ON_FILE.format(chunk='vector_store_chunks')} "
        f"WHERE {where} ORDER BY nearest.distance LIMIT {limit_text}"), params
