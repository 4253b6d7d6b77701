"""The local files provider's bookkeeping: whole files only, expiry, and what a crash leaves."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from builder.config import SqliteBackend
from providers.files.local import LocalFiles, LocalFilesConfig, files
from contract.errors import NotFoundError, PayloadTooLargeError, ServiceUnavailableError
from runtime.storage import Sql, open_database


@pytest.fixture
async def provider(tmp_path: Path) -> LocalFiles:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    await db.create_tables([files])
    directory = tmp_path / "files"
    directory.mkdir()
    return LocalFiles(db, directory, LocalFilesConfig(max_file_bytes=1000))


async def test_an_upload_over_the_limit_leaves_nothing_behind(provider: LocalFiles) -> None:
    with pytest.raises(PayloadTooLargeError):
        await provider.create_file(io.BytesIO(b"x" * 1001), "big.txt", "user_data", None)
    assert list(provider.directory.iterdir()) == [] and (await provider.list_files(None, None, 10, "asc"))[0] == []


async def test_an_expired_file_is_not_served_and_the_sweep_removes_it(provider: LocalFiles) -> None:
    kept = await provider.create_file(io.BytesIO(b"kept"), "kept.txt", "user_data", None)
    gone = await provider.create_file(io.BytesIO(b"gone"), "gone.txt", "user_data", 3600)
    await provider.db.write_one(Sql("UPDATE files SET expires_at = :at WHERE id = :fid"), {"at": int(time.time()) - 1, "fid": gone["id"]})
    with pytest.raises(NotFoundError):
        await provider.get_file(gone["id"])
    assert [item["id"] for item in (await provider.list_files(None, None, 10, "asc"))[0]] == [kept["id"]]
    await provider.sweep()
    assert sorted(path.name for path in provider.directory.iterdir()) == [kept["id"]]
    assert await provider.db.read_one(Sql("SELECT id FROM files WHERE id = :fid"), {"fid": gone["id"]}) is None


async def test_the_sweep_removes_what_a_crash_left_once_it_is_old(provider: LocalFiles) -> None:
    old, fresh = time.time() - 7200, time.time()
    for name, when in (("file-abandoned.part", old), ("file-unrecorded", old), ("file-writing.part", fresh)):
        path = provider.directory / name
        path.write_bytes(b"half")
        os.utime(path, (when, when))
    await provider.sweep()
    assert [path.name for path in provider.directory.iterdir()] == ["file-writing.part"]  # an upload still under way stays


async def test_a_disk_with_no_room_is_a_503_and_leaves_nothing_behind(provider: LocalFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    # The next file's part is /dev/full, where every write fails as on a full disk (ENOSPC).
    monkeypatch.setattr("providers.files.local.random_hex", lambda _: "000000000000")
    (provider.directory / "file-000000000000.part").symlink_to("/dev/full")
    with pytest.raises(ServiceUnavailableError) as refused:
        await provider.create_file(io.BytesIO(b"x" * 100), "notes.txt", "user_data", None)
    assert (refused.value.status, refused.value.code, refused.value.param) == (503, "insufficient_storage", "file")
    assert list(provider.directory.iterdir()) == [] and (await provider.list_files(None, None, 10, "asc"))[0] == []
