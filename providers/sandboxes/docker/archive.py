"""Files in and out of a container through the Engine's archive endpoints, which speak tar."""

from __future__ import annotations

import io
import tarfile
import time

from contract.errors import InvalidRequestError
from contract.sandboxes.protocol import SandboxFile

__all__ = ["SANDBOX_UID", "data_dir_tar", "file_tar", "listing", "single_file"]

SANDBOX_UID = 65534
"""The user the code runs as: what it writes is its own, and what the host writes is too (copyUIDGID)."""


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.uid = info.gid = SANDBOX_UID
    info.mtime = int(time.time())
    return info


def data_dir_tar() -> bytes:
    """/mnt/data itself, owned by the sandbox's user (extracted at /)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(_info("mnt", tarfile.DIRTYPE, 0o755))
        tar.addfile(_info("mnt/data", tarfile.DIRTYPE, 0o755))
    return buffer.getvalue()


def file_tar(parts: list[str], data: bytes) -> bytes:
    """A file at `parts` under the extraction point, with each directory on the way."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for depth in range(1, len(parts)):
            tar.addfile(_info("/".join(parts[:depth]), tarfile.DIRTYPE, 0o755))
        tar.addfile(_info("/".join(parts), tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return buffer.getvalue()


def single_file(archive: bytes, path: str) -> bytes:
    """The one regular file a GET of a file's path returns; refuses a directory or a link."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        member = tar.next()
        if member is None or not member.isreg():
            raise InvalidRequestError(f"{path!r:.200} is not a regular file.", param="path", code="invalid_value")
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read()


def listing(archive: bytes) -> list[SandboxFile]:
    """The regular files of a GET of /mnt/data (its members are named `data/...`)."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        for member in tar:
            name = member.name.partition("/")[2]
            if member.isreg() and name:
                found.append(SandboxFile(name, member.size, int(member.mtime * 1_000_000_000)))
    return sorted(found, key=lambda file: file.path)
