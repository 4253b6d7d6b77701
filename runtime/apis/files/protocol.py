"""What a files provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable

__all__ = ["FileContent", "FilesProvider", "PURPOSES"]

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
"""The `purpose` values of OpenAI's Files API."""


@dataclass(frozen=True)
class FileContent:
    """A file's bytes, read in chunks (a file is never held whole in memory)."""

    chunks: AsyncIterator[bytes]
    size: int
    filename: str


@runtime_checkable
class FilesProvider(Protocol):
    """Files in the OpenAI `FileObject` shape. Unknown, deleted and expired ids raise NotFoundError."""

    @property
    def max_file_bytes(self) -> int:
        """The largest upload accepted (the request size limit of `POST /v1/files`)."""

    async def create_file(self, upload: BinaryIO, filename: str, purpose: str, expires_after_s: int | None) -> dict[str, Any]:
        """Store the bytes read from `upload` (a file object, read in chunks) and their metadata."""

    async def list_files(self, purpose: str | None, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]: ...

    async def get_file(self, file_id: str) -> dict[str, Any]: ...

    async def file_content(self, file_id: str) -> FileContent: ...

    async def delete_file(self, file_id: str) -> dict[str, Any]: ...
