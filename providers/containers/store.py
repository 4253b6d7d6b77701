"""The records of containers and their files, in the `containers` store.

A container's row belongs to the principal that created it (`principal`, null with auth off): every
lookup a request makes goes through `Scoped`, so another principal's container is not there. Its
files are reached through it (the provider looks the container up first); their rows carry the
owner too, for whoever reads the table. A file's `path` is relative to /mnt/data, as the sandbox
backend names it.

A container is `running` until the sweep (or the first request that finds it idle too long) marks it
`expired`; marking it removes its files' rows in the same transaction, as its sandbox goes next.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime.storage import (
    BIGINT, INTEGER, TEXT, Column, Database, Index, InsertRows, Scoped, Sql, String, Unique, in_list, owner_condition, table,
)

__all__ = ["CONTAINER_COLUMNS", "FILE_COLUMNS", "ContainerStore", "container_files", "containers"]

containers = table(
    "containers",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("name", TEXT, nullable=False),
    Column("created_at", BIGINT, nullable=False),
    Column("last_active_at", BIGINT, nullable=False),
    Column("expires_minutes", INTEGER, nullable=False),
    Column("memory_limit", String(8), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("principal", String(160)),
    Column("allowed_domains", TEXT),  # network_policy's, one a line; null: disabled
    Index("ix_containers_principal", ("principal", "seq")),
)

container_files = table(
    "container_files",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("container_id", String(64), nullable=False),
    Column("path", TEXT, nullable=False),
    Column("bytes", BIGINT, nullable=False),
    Column("modified_ns", BIGINT, nullable=False),
    Column("created_at", BIGINT, nullable=False),
    Column("source", String(16), nullable=False),
    Column("principal", String(160)),
    Unique("uq_container_files_path", ("container_id", "path")),
    Index("ix_container_files_container", ("container_id", "seq")),
)

CONTAINER_COLUMNS = ("id", "name", "created_at", "last_active_at", "expires_minutes", "memory_limit", "status", "principal",
                     "allowed_domains")
FILE_COLUMNS = ("id", "container_id", "path", "bytes", "modified_ns", "created_at", "source")

_SELECT = f"SELECT {', '.join(CONTAINER_COLUMNS)} FROM containers"
_SELECT_FILES = f"SELECT {', '.join(FILE_COLUMNS)} FROM container_files"
_CONTAINER = Scoped(f"{_SELECT} WHERE id = :cid{{owner}}", "principal")
_TOUCH = Sql("UPDATE containers SET last_active_at = :now WHERE id = :cid AND status = 'running' AND last_active_at < :now")
_OVERDUE = Sql("SELECT id FROM containers WHERE status = 'running' AND last_active_at + expires_minutes * 60 <= :now")
_RUNNING = Sql("SELECT id, principal FROM containers WHERE status = 'running'")
_EXPIRE = Sql("UPDATE containers SET status = 'expired' WHERE id = :cid AND status = 'running'")
_FORGET_FILES = Sql("DELETE FROM container_files WHERE container_id = :cid")
_FORGET = Sql("DELETE FROM containers WHERE id = :cid")
_FILE = Sql(f"{_SELECT_FILES} WHERE container_id = :cid AND id = :fid")
_FILES = Sql(f"{_SELECT_FILES} WHERE container_id = :cid ORDER BY seq")
_FORGET_FILE = Sql("DELETE FROM container_files WHERE container_id = :cid AND id = :fid")
# A file written again keeps its id, its creation and its source; only what it holds changes.
_PUT_FILE = Sql(
    "INSERT INTO container_files (id, container_id, path, bytes, modified_ns, created_at, source, principal) "
    "VALUES (:id, :container_id, :path, :bytes, :modified_ns, :created_at, :source, :principal) "
    "ON CONFLICT (container_id, path) DO UPDATE SET bytes = excluded.bytes, modified_ns = excluded.modified_ns "
    f"RETURNING {', '.join(FILE_COLUMNS)}"
)


class ContainerStore:
    """The statements the provider runs; rows come back as dicts of CONTAINER_COLUMNS or FILE_COLUMNS."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.create_tables([containers, container_files])

    async def add(self, container: dict[str, Any], files: list[dict[str, Any]]) -> None:
        """A new container and the files it starts with, in one transaction."""
        await self.db.write(InsertRows((containers, [container]), (container_files, files)))

    async def container(self, container_id: str, action: str = "read") -> dict[str, Any] | None:
        """The container, if the caller may `action` it."""
        row = await self.db.read_one(*_CONTAINER.for_caller({"cid": container_id}, action))
        return None if row is None else dict(zip(CONTAINER_COLUMNS, row))

    async def page(self, after: str | None, limit: int, order: str, name: str | None) -> tuple[list[dict[str, Any]], bool]:
        owner, params = owner_condition("principal")
        query = f"{_SELECT} WHERE 1 = 1{owner}"
        params["rows"] = limit + 1
        if name is not None:
            query += " AND name = :name"
            params["name"] = name
        if after is not None:
            query += f" AND seq {'>' if order == 'asc' else '<'} (SELECT seq FROM containers WHERE id = :after)"
            params["after"] = after
        query += f" ORDER BY seq {'ASC' if order == 'asc' else 'DESC'} LIMIT :rows"
        rows = await self.db.read_all(Sql(query), params)
        return [dict(zip(CONTAINER_COLUMNS, row)) for row in rows[:limit]], len(rows) > limit

    async def touch(self, container_id: str, now: int) -> None:
        """Its last activity is now (a running container's, and never back in time)."""
        await self.db.write_one(_TOUCH, {"cid": container_id, "now": now})

    async def overdue(self, now: int) -> list[str]:
        """The running containers idle for longer than their expiry."""
        return [container_id for container_id, in await self.db.read_all(_OVERDUE, {"now": now})]

    async def running(self) -> list[tuple[str, str | None]]:
        """(id, owner) of each running container."""
        return [(container_id, principal) for container_id, principal in await self.db.read_all(_RUNNING)]

    async def expire(self, container_id: str) -> bool:
        """Mark it expired and forget its files; False if it was not running (expired, or gone)."""

        def work(connection: Any) -> bool:
            if not _EXPIRE.run(connection, {"cid": container_id}).rowcount:
                return False
            _FORGET_FILES.run(connection, {"cid": container_id})
            return True

        return await self.db.write(work)

    async def delete(self, container_id: str) -> None:
        """Its record and its files' records."""

        def work(connection: Any) -> None:
            _FORGET_FILES.run(connection, {"cid": container_id})
            _FORGET.run(connection, {"cid": container_id})

        await self.db.write(work)

    async def put_file(self, row: dict[str, Any]) -> dict[str, Any]:
        """Record a file of `row`'s container, or (a path it has already) its new size: the record as it stands."""
        stored = await self.db.write(lambda connection: _PUT_FILE.run(connection, row).first(), one_statement=True)
        assert stored is not None  # an upsert returns its row
        return dict(zip(FILE_COLUMNS, stored))

    async def file(self, container_id: str, file_id: str) -> dict[str, Any] | None:
        row = await self.db.read_one(_FILE, {"cid": container_id, "fid": file_id})
        return None if row is None else dict(zip(FILE_COLUMNS, row))

    async def files(self, container_id: str) -> list[dict[str, Any]]:
        return [dict(zip(FILE_COLUMNS, row)) for row in await self.db.read_all(_FILES, {"cid": container_id})]

    async def list_files(self, container_id: str, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        params: dict[str, Any] = {"cid": container_id, "rows": limit + 1}
        query = f"{_SELECT_FILES} WHERE container_id = :cid"
        if after is not None:
            query += f" AND seq {'>' if order == 'asc' else '<'} (SELECT seq FROM container_files WHERE id = :after)"
            params["after"] = after
        query += f" ORDER BY seq {'ASC' if order == 'asc' else 'DESC'} LIMIT :rows"
        rows = await self.db.read_all(Sql(query), params)
        return [dict(zip(FILE_COLUMNS, row)) for row in rows[:limit]], len(rows) > limit

    async def delete_file(self, container_id: str, file_id: str) -> bool:
        return bool(await self.db.write_one(_FORGET_FILE, {"cid": container_id, "fid": file_id}))

    async def forget_paths(self, container_id: str, paths: Iterable[str]) -> None:
        """The records of files no longer in the sandbox (code removed them)."""
        listed, params = in_list("path", sorted(paths))
        if params:
            await self.db.write_one(Sql(f"DELETE FROM container_files WHERE container_id = :cid AND path IN {listed}"),
                                    {**params, "cid": container_id})
