"""A sandbox's /mnt/data as the host sees it: a directory the server reads and writes for the file
methods, while code in the sandbox may change it under our feet.

Code in the sandbox can make symlinks there (`os.symlink("/etc/shadow", "x")`): a link means one
thing inside (the sandbox's own /etc) and another to the host. So the host never follows one: each
path is walked one directory at a time from the root with `O_NOFOLLOW` (`openat`), which also holds
if the code swaps a directory for a link while we walk. A path with `..`, an absolute path or a
link in it is refused.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.protocol import SandboxFile

__all__ = ["CHUNK", "DataDir", "check_sandbox_id", "split_path"]

CHUNK = 1024 * 1024
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def check_sandbox_id(sandbox_id: str) -> str:
    """An id is a directory's name (and a container's): letters, digits, `-` and `_` only."""
    if not _ID.fullmatch(sandbox_id):
        raise InvalidRequestError(f"Invalid sandbox id: {sandbox_id!r:.140}", param="sandbox_id", code="invalid_value")
    return sandbox_id


def split_path(path: str) -> list[str]:
    """The parts of a path relative to /mnt/data (a leading `/mnt/data/` is allowed); raises on one that leaves it."""
    path = path.removeprefix("/mnt/data/")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not path or path.startswith("/") or "\0" in path or ".." in parts or not parts:
        raise InvalidRequestError(f"Invalid file path {path!r:.200}: give a path relative to /mnt/data, without `..`.",
                                  param="path", code="invalid_value")
    return parts


def _missing(path: str) -> NotFoundError:
    return NotFoundError(f"No such file in the sandbox: {path!r:.200}", param="path", code="not_found")


class DataDir:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _parent(self, parts: list[str], path: str, create: bool) -> int:
        """A descriptor of the directory that holds the last part, reached without following a link."""
        try:
            fd = os.open(self.root, _DIRECTORY)
        except FileNotFoundError:
            raise NotFoundError("No such sandbox (it was destroyed, or never made).", param="sandbox_id", code="not_found") from None
        try:
            for part in parts[:-1]:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    child = os.open(part, _DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    raise _missing(path) from None
                except OSError as error:  # ENOTDIR or ELOOP: a symlink (or a file) where a directory should be
                    raise InvalidRequestError(f"The path {path!r:.200} goes through a link or a non-directory ({error.strerror}).",
                                              param="path", code="invalid_value") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open(self, path: str, flags: int, create: bool = False) -> int:
        parts = split_path(path)
        parent = self._parent(parts, path, create)
        try:
            # O_NONBLOCK: a FIFO the code left there must not hang the server (it is refused below).
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=parent)
        except FileNotFoundError:
            raise _missing(path) from None
        except OSError as error:
            raise InvalidRequestError(f"{path!r:.200} is not a regular file ({error.strerror}).", param="path",
                                      code="invalid_value") from None
        finally:
            os.close(parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidRequestError(f"{path!r:.200} is not a regular file.", param="path", code="invalid_value")
        return fd

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def write(self, path: str, data: bytes) -> SandboxFile:
        if not self.root.is_dir():
            raise NotFoundError("No such sandbox (it was destroyed).", param="sandbox_id", code="not_found")
        parts = split_path(path)
        fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create=True)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            info = os.fstat(out.fileno())
        return SandboxFile("/".join(parts), info.st_size, info.st_mtime_ns)

    async def read(self, path: str) -> AsyncIterator[bytes]:
        fd = await asyncio.to_thread(self._open, path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as handle:
            while chunk := await asyncio.to_thread(handle.read, CHUNK):
                yield chunk

    def listing(self) -> list[SandboxFile]:
        found = []
        for directory, subdirectories, names in os.walk(self.root):  # os.walk never follows links unless told
            for name in names:
                full = os.path.join(directory, name)
                info = os.lstat(full)
                if stat.S_ISREG(info.st_mode):
                    found.append(SandboxFile(os.path.relpath(full, self.root).replace(os.sep, "/"), info.st_size, info.st_mtime_ns))
        return sorted(found, key=lambda file: file.path)

    def delete(self, path: str) -> None:
        os.close(self._open(path, os.O_RDONLY))  # the same checks as a read: a regular file, no link on the way
        parts = split_path(path)
        parent = self._parent(parts, path, False)
        try:
            os.unlink(parts[-1], dir_fd=parent)
        except FileNotFoundError:
            raise _missing(path) from None
        finally:
            os.close(parent)
