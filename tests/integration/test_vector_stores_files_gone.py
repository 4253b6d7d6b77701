"""A file the Files API no longer serves leaves every vector store, however it went: expired (its
`expires_after`), or deleted while the stores were not told (the database failed between the
file's deletion and the stores' removal of it). Its text must not stay searchable. The stores'
sweep (`sweep_s`) finds such files; a server's clock is moved an hour on for the expiry."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from support.live import wait_for
from support.live_stack import run_yaml, served

STORES = """  files: [{provider_id: local, provider_type: local}]
  vector_stores: [{provider_id: builtin, provider_type: builtin, config: {poll_s: 0.2, sweep_s: 0.2}}]
"""


@pytest.fixture(params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[openai.OpenAI, Path]]:
    with running_fake_upstream() as upstream, served(request.param, run_yaml(tmp_path, upstream.base_url, STORES)) as client:
        yield client, tmp_path


def _store_with(client: openai.OpenAI, *file_ids: str) -> str:
    store = client.vector_stores.create(file_ids=list(file_ids))
    wait_for(lambda: client.vector_stores.retrieve(store.id).file_counts.completed == len(file_ids))
    return store.id


def _found(client: openai.OpenAI, store_id: str, query: str) -> list[str]:
    return [hit.file_id for hit in client.vector_stores.search(store_id, query=query).data]


def _only(client: openai.OpenAI, store_id: str, file_id: str) -> bool:
    return [f.id for f in client.vector_stores.files.list(vector_store_id=store_id)] == [file_id]


def test_a_file_deleted_behind_the_stores_back_leaves_them_at_the_next_sweep(stack: tuple[openai.OpenAI, Path]) -> None:
    client, root = stack
    secret = client.files.create(file=("vault.txt", b"The vault code is lighthouse seven."), purpose="assistants").id
    kept = client.files.create(file=("guide.txt", b"The keeper trims the wick at dusk."), purpose="assistants").id
    stores = [_store_with(client, secret, kept) for _ in range(2)]
    assert _found(client, stores[0], "vault code lighthouse")[:1] == [secret]
    [database] = root.glob("state/**/stack.db")
    with sqlite3.connect(database) as db:  # the file's record gone, as a delete whose second step failed leaves it
        assert db.execute("DELETE FROM files WHERE id = ?", (secret,)).rowcount == 1
    for store_id in stores:
        wait_for(lambda: _only(client, store_id, kept), timeout=10)
        assert secret not in _found(client, store_id, "vault code lighthouse")
        counts = client.vector_stores.retrieve(store_id).file_counts
        assert (counts.total, counts.completed) == (1, 1)
    assert _found(client, stores[0], "keeper wick dusk") == [kept]  # what the Files API still serves stays


def test_an_expired_file_leaves_every_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_fake_upstream() as upstream, served("library", run_yaml(tmp_path, upstream.base_url, STORES)) as client:
        brief = client.files.create(file=("brief.txt", b"The harbour gate opens at noon."), purpose="assistants",
                                    expires_after={"anchor": "created_at", "seconds": 3600}).id
        kept = client.files.create(file=("guide.txt", b"The keeper trims the wick at dusk."), purpose="assistants").id
        store_id = _store_with(client, brief, kept)
        assert _found(client, store_id, "harbour gate noon")[:1] == [brief]
        later = time.time() + 3601
        monkeypatch.setattr(time, "time", lambda: later + time.monotonic() % 1)  # an hour on (the library's stack shares this clock)
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(brief)
        wait_for(lambda: _only(client, store_id, kept), timeout=10)
        assert brief not in _found(client, store_id, "harbour gate noon")
