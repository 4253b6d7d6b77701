"""What a files provider implements."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable

from contract.errors import ServiceUnavailableError

__all__ = ["FileContent", "FilesProvider", "NO_ROOM", "PURPOSES", "no_room"]

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
"""The `purpose` values of OpenAI's Files API."""

NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""The errors of a write the server's disk has no room for: full, its quota spent, or the file
system's (or the process's) largest file reached."""


def no_room() -> ServiceUnavailableError:
    """What an upload the server has no room for is answered (a provider raises it for an OSError
    whose errno is in NO_ROOM): the server's disk, not the request, so a 503, never a 500."""
    return ServiceUnavailableError("The server has no room left to store this file. Try again later, or ask its operator.",
                                   param="file", code="insufficient_storage")


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
