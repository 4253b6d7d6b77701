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

import sqlalchemy as sa

from providers.vector_stores.builtin.search import filter_clause
from providers.vector_stores.builtin.tables import chunks, files
from runtime.storage import Database, schema_lock

__all__ = ["HNSW_MAX_DIMENSION", "PgvectorMissing", "ensure_vector_table", "insert_vectors", "require_pgvector", "vector_statement"]

HNSW_MAX_DIMENSION = 2000  # pgvector indexes `vector` columns up to this size; larger ones are searched exactly

PGVECTOR_HELP = ("The PostgreSQL server has no pgvector extension, which vector stores with an embedding model need. Install it "
                 "on the server (Debian/Ubuntu: `apt install postgresql-<version>-pgvector`; or the pgvector/pgvector container "
                 "image; or a PostgreSQL that ships it, such as the `pgserver` package), or remove `embedding_model` from the "
                 "vector_stores provider's config to search by keyword only.")


class PgvectorMissing(RuntimeError):
    def __init__(self, detail: str) -> None:
        super().__init__(f"{PGVECTOR_HELP} ({detail})")


def table_name(dimension: int) -> str:
    return f"vector_store_vectors_{int(dimension)}"


def _create_extension(conn: sa.Connection) -> None:
    schema_lock(conn)
    conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")


async def require_pgvector(db: Database) -> None:
    """Make sure the pgvector extension is there (creating it if the role may); PgvectorMissing if not."""
    if db.dialect != "postgresql":
        return
    try:
        await db.write(_create_extension)
    except sa.exc.DBAPIError as error:
        raise PgvectorMissing(str(error.orig).splitlines()[0]) from None


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

    def run(conn: sa.Connection) -> None:
        schema_lock(conn)
        for statement in statements:
            conn.exec_driver_sql(statement)

    await db.write(run)


def _literal(dialect: str, vector: Sequence[float]) -> Any:
    if dialect == "sqlite":
        return array.array("f", vector).tobytes()  # sqlite-vec's float32 blob
    return "[" + ",".join(repr(float(value)) for value in vector) + "]"


def insert_vectors(conn: sa.Connection, dimension: int, store_id: str, seqs: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
    """Write the vectors of the chunks `seqs` (in the caller's transaction)."""
    dialect = conn.dialect.name
    value = ":embedding" if dialect == "sqlite" else "CAST(:embedding AS vector)"
    key = "rowid" if dialect == "sqlite" else "seq"
    statement = sa.text(f"INSERT INTO {table_name(dimension)} ({key}, vector_store_id, embedding) VALUES (:seq, :store, {value})")
    conn.execute(statement, [{"seq": seq, "store": store_id, "embedding": _literal(dialect, vector)}
                             for seq, vector in zip(seqs, vectors, strict=True)])


def vector_statement(dialect: str, dimension: int, vector: Sequence[float], store_ids: Sequence[str],
                     filters: Mapping[str, Any] | None, limit: int, candidates: int) -> sa.Select[Any]:
    """The `limit` chunks of completed files of the stores nearest to `vector` (among the
    `candidates` nearest chunks), with their cosine similarity as `relevance`. Attribute filters
    go into the nearest-neighbour search itself on SQLite (only matching chunks are scanned);
    on PostgreSQL they apply to the index's candidates."""
    table = sa.table(table_name(dimension), sa.column("rowid"), sa.column("seq"), sa.column("vector_store_id"), sa.column("embedding"),
                     sa.column("distance"), sa.column("k"))
    where = [files.c.status == "completed"]
    if filters is not None:
        where.append(filter_clause(dialect, filters))
    query: sa.BindParameter[Any] = sa.bindparam("query", _literal(dialect, vector))
    if dialect == "sqlite":
        conditions = [table.c.embedding.op("MATCH")(query), table.c.k == candidates, table.c.vector_store_id.in_(list(store_ids))]
        if filters is not None:
            conditions.append(table.c.rowid.in_(
                sa.select(chunks.c.seq).select_from(chunks.join(files, _on_file(chunks)))
                .where(chunks.c.vector_store_id.in_(list(store_ids)), *where)))
        nearest = sa.select(table.c.rowid.label("seq"), table.c.distance).where(*conditions).cte("nearest")
    else:
        distance = table.c.embedding.op("<=>")(sa.cast(query, _Vector())).label("distance")
        nearest = (sa.select(table.c.seq, distance).where(table.c.vector_store_id.in_(list(store_ids)))
                   .order_by(distance).limit(candidates).cte("nearest").prefix_with("MATERIALIZED"))
    joined = nearest.join(chunks, chunks.c.seq == nearest.c.seq).join(files, _on_file(chunks))
    return (sa.select(chunks.c.vector_store_id, chunks.c.file_id, chunks.c.text, files.c.filename, files.c.attributes,
                      (1.0 - nearest.c.distance).label("relevance"))
            .select_from(joined).where(*where).order_by(nearest.c.distance).limit(limit))


class _Vector(sa.types.UserDefinedType[Any]):
    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "vector"


def _on_file(chunk_table: sa.Table) -> sa.ColumnElement[bool]:
    return sa.and_(files.c.vector_store_id == chunk_table.c.vector_store_id, files.c.file_id == chunk_table.c.file_id,
                   files.c.attempt == chunk_table.c.attempt)
