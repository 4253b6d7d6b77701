"""The SQL of the vector stores service (provider.py) over the tables of tables.py: the fixed
statements on stores, their files and batches, and cursor pages of a table by insertion order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.vector_stores.protocol import Page
from providers.vector_stores.builtin.tables import batches, columns, files, rows_of, stores
from runtime.storage import Database, Scoped, Sql, Table

__all__ = [
    "BATCH", "BATCH_COUNTS", "CANCEL_BATCH", "CANCEL_FILES", "CHUNK_TEXTS", "DELETE_STORE", "DETACH", "EXPIRED", "FILE", "FILE_IDS",
    "FORGET_FILE", "SET_ATTRIBUTES", "STORE", "STORES_OF_FILE", "TOUCH", "read_page",
]

# A store the caller may read (or update, delete): its owner is the caller's, or one the access
# policy grants (runtime.storage.Scoped).
STORE = Scoped(f"SELECT {columns(stores)} FROM vector_stores WHERE id = :store_id{{owner}}", "principal")
FILE = Sql(f"SELECT {columns(files)} FROM vector_store_files WHERE vector_store_id = :store_id AND file_id = :file_id")
BATCH = Sql(f"SELECT {columns(batches)} FROM vector_store_file_batches WHERE id = :batch_id AND vector_store_id = :store_id")
BATCH_COUNTS = Sql("SELECT status, count(*) FROM vector_store_files WHERE vector_store_id = :store_id AND batch_id = :batch_id "
                   "GROUP BY status")
TOUCH = Sql("UPDATE vector_stores SET last_active_at = :now WHERE id = :store_id")
DELETE_STORE = [Sql(f"DELETE FROM {name} WHERE {key} = :store_id") for name, key in (
    ("vector_store_chunks", "vector_store_id"), ("vector_store_files", "vector_store_id"),
    ("vector_store_file_batches", "vector_store_id"), ("vector_stores", "id"))]
# A file's rows in one store: its chunks (of every attempt), then the file.
DETACH = [Sql(f"DELETE FROM {name} WHERE vector_store_id = :store_id AND file_id = :file_id")
          for name in ("vector_store_chunks", "vector_store_files")]
SET_ATTRIBUTES = Sql("UPDATE vector_store_files SET attributes = :attributes WHERE vector_store_id = :store_id AND file_id = :file_id",
                     json=["attributes"])
STORES_OF_FILE = Sql("SELECT vector_store_id FROM vector_store_files WHERE file_id = :file_id")
FORGET_FILE = Sql("DELETE FROM vector_store_files WHERE file_id = :file_id")
EXPIRED = Sql("SELECT DISTINCT file_id FROM vector_store_files WHERE file_expires_at <= :now")
# The attached files' ids in order, a page at a time (the first page, or the one after `:after`).
FILE_IDS = {
    False: Sql("SELECT DISTINCT file_id FROM vector_store_files ORDER BY file_id LIMIT :rows"),
    True: Sql("SELECT DISTINCT file_id FROM vector_store_files WHERE file_id > :after ORDER BY file_id LIMIT :rows"),
}
CHUNK_TEXTS = Sql("SELECT text FROM vector_store_chunks WHERE vector_store_id = :store_id AND file_id = :file_id AND attempt = :attempt "
                  "ORDER BY position")
CANCEL_BATCH = Sql("UPDATE vector_store_file_batches SET cancelled = :cancelled WHERE id = :batch_id")
CANCEL_FILES = Sql("UPDATE vector_store_files SET status = 'cancelled', lease_owner = NULL, lease_until = NULL "
                   "WHERE vector_store_id = :store_id AND batch_id = :batch_id AND status = 'in_progress'")


async def read_page(db: Database, table: Table, where: str, params: Mapping[str, Any], id_column: str, page: Page,
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
