"""Vector store scenarios run against any stack (SQLite or PostgreSQL, server or library), through
the openai SDK: each one sets up its own store and asserts what OpenAI's users rely on."""

from __future__ import annotations

import io
import json
import time

import openai
from openai.types.vector_stores import VectorStoreFile

from support.documents import pdf_with_text

__all__ = ["GUIDE", "HARBOUR", "TIDES", "file_search_cites_its_sources", "files_that_cannot_be_read_fail_with_a_reason",
           "stores_ingest_and_search", "upload", "wait_done", "wait_store"]

GUIDE = """# Lighthouse keeping

The keeper trims the wick every evening at dusk and winds the clockwork that turns the lens.

## Fog

In fog the keeper sounds the horn twice a minute until the fog lifts.
"""
TIDES = "Tide tables for the harbour: high water at 06:12 and 18:40; the spring tides come after the full moon.\n"
HARBOUR = """<html><head><title>Harbour rules</title><style>body { color: red }</style></head>
<body><h1>Harbour rules</h1><p>Boats moor on the <b>eastern</b> quay.</p><script>var fog = "horn";</script>
<p>The harbour master collects mooring fees on Fridays.</p></body></html>"""


def upload(client: openai.OpenAI, data: bytes, name: str) -> str:
    return client.files.create(file=(name, io.BytesIO(data)), purpose="assistants").id


def wait_done(client: openai.OpenAI, store_id: str, file_id: str, timeout: float = 20) -> VectorStoreFile:
    deadline = time.monotonic() + timeout
    while True:
        found = client.vector_stores.files.retrieve(file_id, vector_store_id=store_id)
        if found.status != "in_progress" or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def wait_store(client: openai.OpenAI, store_id: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while client.vector_stores.retrieve(store_id).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)


def stores_ingest_and_search(client: openai.OpenAI) -> None:
    guide, harbour = upload(client, GUIDE.encode(), "guide.md"), upload(client, HARBOUR.encode(), "harbour.html")
    manual = upload(client, pdf_with_text("The lamp room is locked at dawn"), "manual.pdf")
    store = client.vector_stores.create(name="coast", file_ids=[guide], metadata={"team": "coast"})
    assert store.id.startswith("vs_") and store.name == "coast" and store.metadata == {"team": "coast"}
    assert store.file_counts.total == 1
    attached = client.vector_stores.files.create(vector_store_id=store.id, file_id=harbour, attributes={"kind": "rules", "year": 2024})
    assert attached.status in ("in_progress", "completed") and attached.attributes == {"kind": "rules", "year": 2024}
    client.vector_stores.files.create(vector_store_id=store.id, file_id=manual, attributes={"kind": "manual", "year": 2025})
    for file_id in (guide, harbour, manual):
        assert wait_done(client, store.id, file_id).status == "completed"

    store = client.vector_stores.retrieve(store.id)
    assert store.status == "completed"
    assert (store.file_counts.completed, store.file_counts.in_progress, store.file_counts.total) == (3, 0, 3)
    assert store.usage_bytes == sum(client.vector_stores.files.retrieve(f, vector_store_id=store.id).usage_bytes
                                    for f in (guide, harbour, manual)) > 0

    page = client.vector_stores.search(vector_store_id=store.id, query="What does the keeper do in fog?")
    assert page.data and page.data[0].file_id == guide and page.data[0].filename == "guide.md"
    assert "horn" in page.data[0].content[0].text and 0 < page.data[0].score <= 1
    pdf = client.vector_stores.search(vector_store_id=store.id, query="when is the lamp room locked")
    assert pdf.data[0].file_id == manual and "dawn" in pdf.data[0].content[0].text

    html = " ".join(part.text for part in client.vector_stores.files.content(file_id=harbour, vector_store_id=store.id))
    assert "eastern" in html and "color: red" not in html and "var fog" not in html

    filtered = client.vector_stores.search(vector_store_id=store.id, query="horn fog mooring fees lamp",
                                           filters={"type": "eq", "key": "kind", "value": "rules"})
    assert [hit.file_id for hit in filtered.data] == [harbour]
    newer = client.vector_stores.search(vector_store_id=store.id, query="mooring fees lamp room",
                                        filters={"type": "gte", "key": "year", "value": 2025})
    assert [hit.file_id for hit in newer.data] == [manual]
    either = client.vector_stores.search(vector_store_id=store.id, query="horn mooring lamp", filters={
        "type": "or", "filters": [{"type": "eq", "key": "kind", "value": "manual"}, {"type": "lt", "key": "year", "value": 2025}]})
    assert sorted(hit.file_id for hit in either.data) == sorted([harbour, manual])
    untagged = client.vector_stores.search(vector_store_id=store.id, query="horn mooring lamp",
                                           filters={"type": "nin", "key": "kind", "value": ["rules", "manual"]})
    assert [hit.file_id for hit in untagged.data] == [guide]  # a file without the attribute is not in any list

    removed = client.vector_stores.files.delete(file_id=guide, vector_store_id=store.id)
    assert removed.deleted
    assert all(hit.file_id != guide for hit in client.vector_stores.search(vector_store_id=store.id, query="keeper fog horn").data)
    assert client.vector_stores.retrieve(store.id).file_counts.total == 2
    assert client.files.retrieve(guide).id == guide  # the file itself stays
    assert client.vector_stores.delete(store.id).deleted


def files_that_cannot_be_read_fail_with_a_reason(client: openai.OpenAI) -> None:
    binary = upload(client, bytes(range(256)) * 8, "blob.bin")
    broken = upload(client, b"%PDF-1.7\n this is not a PDF at all", "broken.pdf")
    blank = upload(client, b"   \n\n  \t\n", "blank.txt")
    store = client.vector_stores.create(file_ids=[binary, broken, blank])
    results = {file_id: wait_done(client, store.id, file_id) for file_id in (binary, broken, blank)}
    for file_id, code in ((binary, "unsupported_file"), (broken, "invalid_file"), (blank, "invalid_file")):
        failed = results[file_id]
        assert failed.status == "failed" and failed.last_error is not None and failed.last_error.code == code
    assert "broken.pdf" in (results[broken].last_error.message if results[broken].last_error else "")
    counts = client.vector_stores.retrieve(store.id).file_counts
    assert (counts.failed, counts.completed, counts.total) == (3, 0, 3)
    assert client.vector_stores.retrieve(store.id).status == "completed"  # nothing left in progress


def file_search_cites_its_sources(client: openai.OpenAI, model: str) -> None:
    ids = [upload(client, text.encode(), name) for name, text in (("guide.md", GUIDE), ("tides.txt", TIDES))]
    store = client.vector_stores.create(file_ids=ids)
    wait_store(client, store.id)
    answer = "In fog the keeper sounds the horn [1]. Tides follow the moon [2]."
    ask = f'[tool:file_search {{"queries": ["fog horn", "tides moon"]}}] [answer {json.dumps({"text": answer})}]'
    tools = [{"type": "file_search", "vector_store_ids": [store.id]}]
    response = client.responses.create(model=model, input=ask, tools=tools, include=["file_search_call.results"])  # type: ignore[list-item]
    call, message = response.output
    assert call.type == "file_search_call" and call.status == "completed" and call.results
    assert message.type == "message" and message.content[0].type == "output_text"
    assert message.content[0].text == "In fog the keeper sounds the horn. Tides follow the moon."
    assert [(a.file_id, a.index) for a in message.content[0].annotations] == [  # type: ignore[union-attr]
        (ids[0], len("In fog the keeper sounds the horn")), (ids[1], len("In fog the keeper sounds the horn. Tides follow the moon"))]
