"""The Vector stores API through the openai SDK, in server and library modes: ingestion as a job
that ends completed or failed with a reason, keyword search with filters, and every count true."""

from __future__ import annotations

import openai
import pytest

from support.vector_stores import GUIDE, files_that_cannot_be_read_fail_with_a_reason, stores_ingest_and_search, upload, wait_done


def test_a_store_ingests_text_html_and_pdf_and_searches_them_by_keyword(openai_client: openai.OpenAI) -> None:
    stores_ingest_and_search(openai_client)


def test_a_file_with_no_text_fails_with_a_reason(openai_client: openai.OpenAI) -> None:
    files_that_cannot_be_read_fail_with_a_reason(openai_client)


def test_stores_are_listed_updated_and_expire(openai_client: openai.OpenAI) -> None:
    first = openai_client.vector_stores.create(name="one")
    second = openai_client.vector_stores.create(name="two", expires_after={"anchor": "last_active_at", "days": 7})
    assert second.expires_after is not None and second.expires_after.days == 7
    assert second.expires_at == second.last_active_at + 7 * 86400  # type: ignore[operator]
    newest = [store.id for store in openai_client.vector_stores.list(limit=1)]
    assert newest.index(second.id) < newest.index(first.id)
    updated = openai_client.vector_stores.update(first.id, name="renamed", metadata={"k": "v"}, expires_after={"anchor": "last_active_at", "days": 1})
    assert (updated.name, updated.metadata, updated.expires_after.days if updated.expires_after else None) == ("renamed", {"k": "v"}, 1)


def test_files_are_listed_by_status_and_their_attributes_updated(openai_client: openai.OpenAI) -> None:
    good, bad = upload(openai_client, GUIDE.encode(), "guide.md"), upload(openai_client, bytes(range(256)), "x.bin")
    store = openai_client.vector_stores.create(file_ids=[good, bad])
    wait_done(openai_client, store.id, good), wait_done(openai_client, store.id, bad)
    assert [f.id for f in openai_client.vector_stores.files.list(vector_store_id=store.id, filter="failed")] == [bad]
    assert [f.id for f in openai_client.vector_stores.files.list(vector_store_id=store.id, filter="completed")] == [good]
    assert [f.id for f in openai_client.vector_stores.files.list(vector_store_id=store.id, order="asc", limit=1)] == [good, bad]
    updated = openai_client.vector_stores.files.update(file_id=good, vector_store_id=store.id, attributes={"lang": "en"})
    assert updated.attributes == {"lang": "en"} and updated.status == "completed"


def test_a_batch_reports_its_files_and_can_be_cancelled(openai_client: openai.OpenAI) -> None:
    ids = [upload(openai_client, f"note {i} about the fog horn".encode(), f"n{i}.txt") for i in range(3)]
    store = openai_client.vector_stores.create()
    batch = openai_client.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, file_ids=ids, attributes={"src": "batch"},
                                                                    poll_interval_ms=50)
    assert batch.id.startswith("vsfb_") and batch.status == "completed"
    assert (batch.file_counts.completed, batch.file_counts.total) == (3, 3)
    listed = openai_client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id)
    assert sorted(f.id for f in listed) == sorted(ids) and all(f.attributes == {"src": "batch"} for f in listed)
    cancelled = openai_client.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id)
    assert cancelled.status == "cancelled" and cancelled.file_counts.completed == 3  # what was done stays done


def test_unknown_ids_are_404_and_bad_bodies_400(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        openai_client.vector_stores.retrieve("vs_missing")
    store = openai_client.vector_stores.create(name="empty")
    with pytest.raises(openai.NotFoundError):
        openai_client.vector_stores.files.create(vector_store_id=store.id, file_id="file-missing")
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client.vector_stores.retrieve("file-abc")
    assert bad.value.body["param"] == "vector_store_id"  # type: ignore[index]
    cases = [
        ({"query": "x", "max_num_results": 99}, "max_num_results"),
        ({"query": "x", "filters": {"type": "near", "key": "a", "value": 1}}, "filters.type"),
        ({"query": "x", "filters": {"type": "gt", "key": "a", "value": "high"}}, "filters.value"),
        ({"query": "", }, "query"),
        ({"query": "x", "ranking_options": {"score_threshold": 2}}, "ranking_options.score_threshold"),
        ({"query": "x", "colour": "blue"}, "colour"),
    ]
    for body, param in cases:
        with pytest.raises(openai.BadRequestError) as bad:
            openai_client.post(f"/vector_stores/{store.id}/search", body=body, cast_to=object)
        assert bad.value.body["param"] == param, body  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client.vector_stores.create(chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0}},
                                           file_ids=["file-x"])
    assert bad.value.body["param"] == "chunking_strategy.static.max_chunk_size_tokens"  # type: ignore[index]


def test_ogx_clients_extensions_are_accepted(openai_client: openai.OpenAI) -> None:
    store = openai_client.vector_stores.create(name="ogx", extra_body={"embedding_model": "fake-embed", "embedding_dimension": 384,
                                                                        "provider_id": "builtin"})
    page = openai_client.vector_stores.search(vector_store_id=store.id, query="anything", extra_body={"search_mode": "hybrid"})
    assert page.data == []
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client.vector_stores.search(vector_store_id=store.id, query="anything", extra_body={"search_mode": "psychic"})
    assert bad.value.body["param"] == "search_mode"  # type: ignore[index]
    # OGX's clients repeat the store's model when they attach files: accepted, and the store's own is used.
    note = upload(openai_client, b"The harbour light is green.", "light.txt")
    attached = openai_client.vector_stores.files.create(vector_store_id=store.id, file_id=note, extra_body={"embedding_model": "fake-embed"})
    batch = openai_client.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[note],
                                                             extra_body={"embedding_model": "fake-embed", "provider_id": "builtin"})
    assert attached.id == note and batch.file_counts.total == 1
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client.vector_stores.files.create(vector_store_id=store.id, file_id=note, extra_body={"embedding_model": 5})
    assert bad.value.body["param"] == "embedding_model"  # type: ignore[index]


def test_small_files_are_answered_completed_when_attached(openai_client: openai.OpenAI) -> None:
    """Attaching waits up to `attach_wait_s` (1 s here) for the ingestion: what OGX's clients expect,
    and what OpenAI's clients take as well (they poll only while a file is in_progress)."""
    notes = [upload(openai_client, f"Note {i}: the quay is closed at dusk.".encode(), f"q{i}.txt") for i in range(4)]
    store = openai_client.vector_stores.create(file_ids=[notes[0]])
    assert store.status == "completed" and store.file_counts.completed == 1
    attached = openai_client.vector_stores.files.create(vector_store_id=store.id, file_id=notes[1])
    assert attached.status == "completed" and attached.usage_bytes > 0
    batch = openai_client.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=notes[2:])
    assert batch.status == "completed" and batch.file_counts.completed == 2
    hits = openai_client.vector_stores.search(vector_store_id=store.id, query="quay dusk", max_num_results=10).data
    assert sorted(hit.file_id for hit in hits) == sorted(notes)


def test_a_deleted_file_leaves_every_store_that_held_it(openai_client: openai.OpenAI) -> None:
    # OpenAI: "Delete a file and remove it from all vector stores." Its text must not stay searchable.
    secret, kept = upload(openai_client, b"The vault code is lighthouse seven.", "vault.txt"), upload(openai_client, GUIDE.encode(), "guide.md")
    stores = [openai_client.vector_stores.create(file_ids=[secret, kept]) for _ in range(2)]
    for store in stores:
        wait_done(openai_client, store.id, secret), wait_done(openai_client, store.id, kept)
        assert [hit.file_id for hit in openai_client.vector_stores.search(store.id, query="vault code lighthouse").data][:1] == [secret]
    assert openai_client.files.delete(secret).deleted
    for store in stores:
        assert [f.id for f in openai_client.vector_stores.files.list(vector_store_id=store.id)] == [kept]
        assert secret not in [hit.file_id for hit in openai_client.vector_stores.search(store.id, query="vault code lighthouse").data]
        counts = openai_client.vector_stores.retrieve(store.id).file_counts
        assert (counts.total, counts.completed) == (1, 1)
        with pytest.raises(openai.NotFoundError):
            openai_client.vector_stores.files.retrieve(file_id=secret, vector_store_id=store.id)
    with pytest.raises(openai.NotFoundError):  # deleted once: a second delete is the file's 404, as before
        openai_client.files.delete(secret)
