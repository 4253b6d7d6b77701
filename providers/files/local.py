"""The built-in files provider: bytes in a directory of the state dir, metadata in the `files` store.

An upload is copied in chunks into `<id>.part`, renamed into place once whole, and only then
recorded: a file listed is always a whole file, and what a crash leaves (a `.part`, or bytes with
no record) is removed at the next start. A deleted file's record goes first, then its bytes.
Expired files are not served and are removed by a sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from contract.spec import Api, ProviderContext, ProviderSpec
from contract.files.protocol import NO_ROOM, FileContent, no_room
from contract.caller import principal_id
from contract.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from contract.ids import random_hex
from runtime.storage import (
    BIGINT, INTEGER, TEXT, Column, Database, Index, InsertRows, Scoped, Sql, String, every, in_list,
    owner_condition, table,
)

__all__ = ["LOCAL", "LocalFiles"]

log = logging.getLogger("stack")

CHUNK = 1024 * 1024

files = table(
    "files",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("created_at", BIGINT, nullable=False),
    Column("expires_at", BIGINT, index=True),
    Column("purpose", String(32), nullable=False, index=True),
    Column("filename", TEXT, nullable=False),
    Column("bytes", BIGINT, nullable=False),
    # Who uploaded it (runtime.security.auth): with auth on, only they reach it. Null when auth was off.
    Column("principal", String(160)),
    Index("ix_files_principal", ("principal", "seq")),
)

_PUBLIC = ("id", "created_at", "expires_at", "purpose", "filename", "bytes")  # a file's record, in this order
_SELECT = f"SELECT {', '.join(_PUBLIC)} FROM files"
_LIVE = "(expires_at IS NULL OR expires_at > :now)"
_ROW = Scoped(f"{_SELECT} WHERE id = :fid AND {_LIVE}{{owner}}", "principal")
_DELETE = Sql("DELETE FROM files WHERE id = :fid")
_EXPIRED = Sql(f"SELECT id FROM files WHERE NOT {_LIVE}")
_KNOWN = Sql("SELECT id FROM files")


class LocalFilesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    directory: Path | None = Field(default=None, description="Where the bytes are kept (default: <state_dir>/files)")
    max_file_bytes: int = Field(default=512 * 1024 * 1024, ge=1, description="The largest upload (OpenAI's limit: 512 MB)")
    sweep_s: float = Field(default=60.0, gt=0, description="How often expired files are removed")


class LocalFiles:
    """Implements contract.files.protocol.FilesProvider."""

    def __init__(self, db: Database, directory: Path, config: LocalFilesConfig) -> None:
        self.db = db
        self.directory = directory
        self.config = config

    @property
    def max_file_bytes(self) -> int:
        return self.config.max_file_bytes

    async def create_file(self, upload: BinaryIO, filename: str, purpose: str, expires_after_s: int | None) -> dict[str, Any]:
        file_id = f"file-{random_hex(12)}"
        size = await asyncio.to_thread(self._write, file_id, upload)
        now = int(time.time())
        row = {"id": file_id, "created_at": now, "expires_at": now + expires_after_s if expires_after_s else None,
               "purpose": purpose, "filename": filename[:1024], "bytes": size}
        try:
            await self.db.write(InsertRows((files, [{**row, "principal": principal_id()}])))
        except BaseException:
            self._path(file_id).unlink(missing_ok=True)
            raise
        return _public(row)

    def _write(self, file_id: str, upload: BinaryIO) -> int:
        part = self.directory / f"{file_id}.part"
        size = 0
        try:
            with part.open("wb") as out:
                while chunk := upload.read(CHUNK):
                    size += len(chunk)
                    if size > self.config.max_file_bytes:
                        raise PayloadTooLargeError(f"The file is larger than this server's limit of {self.config.max_file_bytes} bytes.",
                                                   param="file", code="file_too_large")
                    out.write(chunk)
            if size == 0:
                raise InvalidRequestError("The file is empty.", param="file", code="invalid_value")
            os.replace(part, self._path(file_id))
        except OSError as error:
            if error.errno not in NO_ROOM:
                raise
            log.warning("an upload of %d bytes or more did not fit in %s: %s", size, self.directory, os.strerror(error.errno))
            raise no_room() from None
        finally:
            part.unlink(missing_ok=True)
        return size

    def _path(self, file_id: str) -> Path:
        return self.directory / file_id

    async def list_files(self, purpose: str | None, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        owner, params = owner_condition("principal")
        query = f"{_SELECT} WHERE {_LIVE}{owner}"
        params.update(now=int(time.time()), rows=limit + 1)
        if purpose is not None:
            query += " AND purpose = :purpose"
            params["purpose"] = purpose
        if after is not None:
            query += f" AND seq {'>' if order == 'asc' else '<'} (SELECT seq FROM files WHERE id = :after)"
            params["after"] = after
        query += f" ORDER BY seq {'ASC' if order == 'asc' else 'DESC'} LIMIT :rows"
        rows = await self.db.read_all(Sql(query), params)
        return [_public(_record(row)) for row in rows[:limit]], len(rows) > limit

    async def get_file(self, file_id: str) -> dict[str, Any]:
        return _public(await self._row(file_id))

    async def _row(self, file_id: str, action: str = "read") -> dict[str, Any]:
        row = await self.db.read_one(*_ROW.for_caller({"fid": file_id, "now": int(time.time())}, action))
        if row is None:
            raise NotFoundError(f"No such File object: {file_id}", param="file_id", code="not_found")
        return _record(row)

    async def file_content(self, file_id: str) -> FileContent:
        row = await self._row(file_id)
        path = self._path(file_id)
        return FileContent(_read(path), int(row["bytes"]), str(row["filename"]))

    async def delete_file(self, file_id: str) -> dict[str, Any]:
        await self._row(file_id, "delete")
        await self.db.write_one(_DELETE, {"fid": file_id})
        self._path(file_id).unlink(missing_ok=True)
        return {"id": file_id, "object": "file", "deleted": True}

    async def sweep(self) -> None:
        """Remove expired files, and what a crash left: parts, and bytes with no record."""
        expired = [file_id for file_id, in await self.db.read_all(_EXPIRED, {"now": int(time.time())})]
        if expired:
            listed, params = in_list("fid", expired)
            await self.db.write_one(Sql(f"DELETE FROM files WHERE id IN {listed}"), params)
            for file_id in expired:
                self._path(file_id).unlink(missing_ok=True)
        known = {file_id for file_id, in await self.db.read_all(_KNOWN)}
        for path in self.directory.iterdir():
            if path.name.endswith(".part") or (path.name.startswith("file-") and path.name not in known):
                if time.time() - path.stat().st_mtime > 3600:  # not an upload still being written
                    path.unlink(missing_ok=True)


async def _read(path: Path) -> AsyncIterator[bytes]:
    handle = await asyncio.to_thread(path.open, "rb")
    try:
        while chunk := await asyncio.to_thread(handle.read, CHUNK):
            yield chunk
    finally:
        handle.close()


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(_PUBLIC, row))


def _public(row: Any) -> dict[str, Any]:
    return {"id": row["id"], "object": "file", "bytes": row["bytes"], "created_at": row["created_at"], "expires_at": row["expires_at"],
            "filename": row["filename"], "purpose": row["purpose"], "status": "processed", "status_details": None}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[LocalFilesConfig]) -> AsyncIterator[LocalFiles]:
    directory = (context.config.directory or context.state_dir / "files").expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    db = context.databases("files")
    await db.create_tables([files])
    provider = LocalFiles(db, directory, context.config)
    await provider.sweep()
    sweeper = every(context.config.sweep_s, provider.sweep, "the sweep of expired files")
    try:
        yield provider
    finally:
        sweeper.cancel()


LOCAL = ProviderSpec(
    api=Api.files,
    name="local",
    config_model=LocalFilesConfig,
    factory=create,
    description="Files kept in a directory of the state dir, their metadata in the `files` store",
)
