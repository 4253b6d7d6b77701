"""The async storage layer the services keep their records in.

One `Database` per configured backend: SQLite (the embedded default, through sqlean) or PostgreSQL
(through asyncpg). Services declare their tables (`table`, `Column`, `Index`), create them with
`create_tables`, and run `Sql` statements in `write()` / `read_with()` (a synchronous function run
in one transaction) or through the one-statement helpers (`read_one`, `read_all`, `write_one`).

The package's modules, from the contract down:

- `backends`: `Storage` (each store's backend) and `open_database` (a backend's `Database`);
- `database`: `Database`, one backend's writes, reads and signals;
- `migrations`: the schema's creation and additive migrations, under the schema's lock;
- `schema`: tables as declared, and their DDL on each database;
- `sql`: `Sql` statements, `Scoped` ones (the caller's rows), inserts (`InsertRows`) and upserts;
- `driver`: where a statement meets the driver, and what it comes back as (`Ran`, `IntegrityError`);
- `sqlite` and `postgres`: each database's own machinery (connections, group commit and
  checkpoints; the pool, the greenlet a work function runs in, and LISTEN);
- `tasks`: a write run to its end whatever befalls its caller, and providers' periodic sweeps (`every`);
- `outage`: a database that cannot serve (unreachable, full, locked) told from other failures, and
  answered `StorageUnavailableError` (503, retryable).

A provider imports from `runtime.storage` only: the names below are the contract.
"""

from runtime.storage.backends import Storage, open_database
from runtime.storage.database import SMALL_WRITE_ROWS, Database
from runtime.storage.driver import IntegrityError, Ran, dialect_of
from runtime.storage.migrations import schema_lock
from runtime.storage.outage import StorageUnavailableError, sqlstate, when_back
from runtime.storage.schema import BIGINT, BOOLEAN, FLOAT, INTEGER, JSON, TEXT, Column, Index, Kind, String, Table, Unique, table
from runtime.storage.sql import InsertRows, Scoped, Sql, in_list, insert_rows, loads, owner_condition
from runtime.storage.tasks import every

__all__ = [
    "BIGINT", "BOOLEAN", "FLOAT", "INTEGER", "JSON", "SMALL_WRITE_ROWS", "TEXT", "Column", "Database", "Index", "InsertRows",
    "IntegrityError", "Kind", "Ran", "Scoped", "Sql", "Storage", "StorageUnavailableError", "String", "Table", "Unique", "dialect_of", "every",
    "in_list", "insert_rows", "loads", "open_database", "owner_condition", "schema_lock", "sqlstate", "table", "when_back",
]
