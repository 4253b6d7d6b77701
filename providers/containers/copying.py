"""What goes into a container: a file's name there, a copy of a files API file, a memory tier."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from contract.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from contract.files.protocol import FilesProvider
from contract.sandboxes.protocol import MEMORY_TIERS

__all__ = ["file_name", "from_files_api", "memory_bytes"]


def file_name(filename: str, fallback: str) -> str:
    """The name a file gets in /mnt/data: its own, without any directory a client put in it (a name
    is never a way out of /mnt/data, nor into a folder of it); `fallback` when nothing is left."""
    name = filename.replace("\\", "/").rpartition("/")[2].replace("\x00", "").strip()
    return name[:255] if name not in ("", ".", "..") else fallback


async def from_files_api(files: FilesProvider | None, file_id: str, max_bytes: int,
                         param: str) -> tuple[str, Callable[[], Awaitable[bytes]]]:
    """A files API file's name in /mnt/data and how to read its bytes, once it is known to be the
    caller's and small enough: every file of a request is checked before anything is written."""
    if files is None:
        raise InvalidRequestError(f"Invalid '{param}': this server has no files API to copy '{file_id[:80]}' from (its run.yaml "
                                  "configures no `files` provider). Upload the file to the container instead.", param=param,
                                  code="invalid_value")
    try:
        record = await files.get_file(file_id)
    except NotFoundError:
        raise NotFoundError(f"No file found with id '{file_id[:80]}' (in '{param}').", param=param, code="not_found") from None
    if int(record["bytes"]) > max_bytes:
        raise PayloadTooLargeError(f"File '{file_id}' has {record['bytes']} bytes, more than this server's limit of {max_bytes} for a "
                                   "container file.", param=param, code="file_too_large")

    async def read() -> bytes:
        content = await files.file_content(file_id)
        return b"".join([chunk async for chunk in content.chunks])

    return file_name(str(record["filename"]), file_id), read


def memory_bytes(tier: str, most: int) -> int:
    """The bytes of a memory tier (`memory_limit`), if this server's sandboxes may have that much."""
    if tier not in MEMORY_TIERS:
        raise InvalidRequestError(f"Invalid 'memory_limit': {tier[:20]!r} (expected one of: {', '.join(MEMORY_TIERS)}).",
                                  param="memory_limit", code="invalid_value")
    if MEMORY_TIERS[tier] > most:
        allowed = [name for name, size in MEMORY_TIERS.items() if size <= most]
        raise InvalidRequestError(f"Invalid 'memory_limit': {tier!r} is more than this server's sandboxes may have ({most >> 20} MiB); "
                                  f"it allows {', '.join(allowed) or 'none of the tiers'}.", param="memory_limit", code="invalid_value")
    return MEMORY_TIERS[tier]
