"""The Files API through the openai SDK, in server and library modes."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from runtime.testing.targets import free_port


def upload(client: openai.OpenAI, data: bytes, name: str = "notes.txt", purpose: str = "user_data") -> str:
    return client.files.create(file=(name, io.BytesIO(data)), purpose=purpose).id  # type: ignore[arg-type]


def test_a_file_is_uploaded_listed_read_and_deleted(openai_client: openai.OpenAI) -> None:
    data = b"The lighthouse keeper counts the ships.\n" * 10
    created = openai_client.files.create(file=("keeper.txt", io.BytesIO(data)), purpose="assistants")
    assert created.id.startswith("file-") and created.object == "file"
    assert (created.filename, created.bytes, created.purpose, created.status) == ("keeper.txt", len(data), "assistants", "processed")
    assert openai_client.files.retrieve(created.id).model_dump() == created.model_dump()
    assert openai_client.files.content(created.id).read() == data
    assert created.id in [item.id for item in openai_client.files.list(purpose="assistants")]
    assert created.id not in [item.id for item in openai_client.files.list(purpose="batch")]
    deleted = openai_client.files.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError):
        openai_client.files.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.files.content(created.id)


def test_a_file_larger_than_the_servers_request_limit_is_accepted(openai_client: openai.OpenAI, tmp_path: Path) -> None:
    # The integration stack refuses bodies over 64 KiB; the upload route has the files provider's own limit.
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024))
    with big.open("rb") as handle:
        created = openai_client.files.create(file=handle, purpose="user_data")
    assert created.bytes == 3 * 1024 * 1024 and created.filename == "big.bin"
    assert openai_client.files.content(created.id).read() == big.read_bytes()
    with pytest.raises(openai.APIStatusError) as refused:
        openai_client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x" * 70_000}])
    assert refused.value.status_code == 413  # elsewhere the server's limit stands


def test_pages_follow_the_cursor_in_both_orders(openai_client: openai.OpenAI) -> None:
    ids = [upload(openai_client, f"page {i}".encode(), purpose="evals") for i in range(5)]
    newest_first = [item.id for item in openai_client.files.list(purpose="evals", limit=2)]
    assert newest_first[:5] == ids[::-1]
    oldest_first = [item.id for item in openai_client.files.list(purpose="evals", limit=2, order="asc")]
    assert oldest_first[-5:] == ids


def test_an_expiring_file_says_when_it_expires(openai_client: openai.OpenAI) -> None:
    created = openai_client.files.create(file=("brief.txt", io.BytesIO(b"soon gone")), purpose="user_data",
                                         expires_after={"anchor": "created_at", "seconds": 3600})
    assert created.expires_at == created.created_at + 3600


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"purpose": "nonsense"}, "purpose"),
    ({"purpose": "user_data", "expires_after": {"anchor": "created_at", "seconds": 60}}, "expires_after.seconds"),
    ({"purpose": "user_data", "expires_after": {"anchor": "last_active_at", "seconds": 3600}}, "expires_after.anchor"),
])
def test_bad_uploads_are_400s_naming_the_field(openai_client: openai.OpenAI, kwargs: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.files.create(file=("x.txt", io.BytesIO(b"x")), **kwargs)  # type: ignore[arg-type]
    assert error.value.param == param


def test_an_upload_without_a_purpose_is_a_400_saying_it_is_missing(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.post("/files", cast_to=object, body={}, files=[("file", ("x.txt", b"x", "text/plain"))],
                           options={"headers": {"content-type": "multipart/form-data"}})
    assert error.value.body == {"message": "Missing required parameter: 'purpose'.", "type": "invalid_request_error",  # type: ignore[comparison-overlap]
                                "param": "purpose", "code": "missing_required_parameter"}


def test_an_empty_file_is_refused(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.files.create(file=("empty.txt", io.BytesIO(b"")), purpose="user_data")
    assert error.value.param == "file"


def _no_room_for_files_over(limit: int) -> None:
    # In the server's process only: files past `limit` bytes cannot be written (EFBIG, as a full
    # disk gives ENOSPC); Python ignores SIGXFSZ, so the write raises instead of killing it.
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_an_upload_the_disk_has_no_room_for_is_a_503_and_leaves_nothing(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"""
name: no-room
state_dir: {tmp_path / 'state'}
providers:
  files: [{{provider_id: local, provider_type: local}}]
""")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=lambda: _no_room_for_files_over(2 * 1024 * 1024))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=30)
        for _ in range(300):
            try:
                client.files.list()
                break
            except openai.APIConnectionError:
                time.sleep(0.05)
        with pytest.raises(openai.APIStatusError) as refused:
            upload(client, os.urandom(3 * 1024 * 1024))
        assert refused.value.status_code == 503
        assert refused.value.body == {"message": "The server has no room left to store this file. Try again later, or ask its operator.",
                                      "type": "service_unavailable", "param": "file", "code": "insufficient_storage"}
        assert [path.name for path in (tmp_path / "state").rglob("file-*")] == []  # no part left behind
        assert client.files.list().data == []  # nor a record
        small = upload(client, b"fits\n")  # what fits is stored as ever
        assert client.files.content(small).read() == b"fits\n"
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=30)
    assert b"Traceback" not in errors  # one line in the log, not a server error's
    assert b"did not fit" in errors
