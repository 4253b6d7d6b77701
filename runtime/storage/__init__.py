"""The async storage layer the services keep their records in.

One `Database` per configured backend: SQLite (the embedded default) or PostgreSQL through
asyncpg. Services declare their tables with SQLAlchemy Core (`json_type()` for JSON columns),
create them with `create_tables`, and go through `write()` / `read_with()` (a synchronous
function run in one transaction) or the one-statement helpers. `read()` / `transaction()` give
an async connection instead; on SQLite the async engine behind them (aiosqlite) is only built,
and `sqlalchemy.ext.asyncio` only imported, when they are first used, which keeps start-up lean.

The package's modules, from the contract down:

- `database`: `Database`, `open_database`, `Storage`, the schema's creation and additive migrations;
- `statements`: `Prepared` and `InsertRows` (the hot paths' statements), `caller_may` and
  `for_caller` (the caller's rows), `json_type`;
- `sqlite` and `postgres`: each database's own machinery (connections, group commit and
  checkpoints; kept connections, autocommit and LISTEN);
- `tasks`: a write run to its end whatever befalls its caller;
- `outage`: a database that cannot serve (unreachable, full, locked) told from other failures, and
  answered `StorageUnavailableError` (503, retryable).

A provider imports from `runtime.storage` only: the names below are the contract.
"""

from runtime.storage.database import PARTIAL_INDEX_WHERE, SMALL_WRITE_ROWS, Database, Storage, open_database, schema_lock
from runtime.storage.driver import IntegrityError, Ran
from runtime.storage.outage import StorageUnavailableError, when_back
from runtime.storage.schema import BIGINT, BOOLEAN, FLOAT, INTEGER, JSON, TEXT, Column, Index, Kind, String, Table, Unique, table
from runtime.storage.sql import Scoped, Sql, in_list, loads, owner_condition
from runtime.storage.statements import InsertRows, Prepared, caller_may, for_caller, insert_into, insert_rows, json_type, rows_of_json

__all__ = [
    "BIGINT", "BOOLEAN", "FLOAT", "INTEGER", "JSON", "PARTIAL_INDEX_WHERE", "SMALL_WRITE_ROWS", "TEXT", "Column", "Database", "Index",
    "InsertRows", "IntegrityError", "Kind", "Prepared", "Ran", "Scoped", "Sql", "Storage", "StorageUnavailableError", "String", "Table", "Unique",
    "caller_may", "for_caller", "in_list", "insert_into", "insert_rows", "json_type", "loads", "open_database", "owner_condition", "rows_of_json",
    "schema_lock", "table", "when_back",
]
