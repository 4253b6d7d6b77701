"""Hybrid search: stores with an embedding model keep a vector per chunk in the database's own
vector index (sqlite-vec on SQLite, pgvector on PostgreSQL) and fuse vector and keyword matches.
The embeddings are real (wordllama's static model, in process), so meaning, not only words,
finds a chunk; the same scenarios run on SQLite (server and library) and on a PostgreSQL with
pgvector (from the `pgserver` package)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from runtime.library_client import LibraryClient
from runtime.testing.targets import open_target
from support.postgres import fresh_database, pgvector_database
from support.vector_stores import upload, wait_done, wait_store

pytest.importorskip("wordllama", reason="the local extra (pip install -e '.[local]') is not installed")

MODEL = "wordllama-l2-supercat"
DOCS = {
    "fog.txt": "In fog the keeper sounds the horn twice a minute until the fog lifts.",
    "tides.txt": "Tide tables for the harbour: high water at 06:12 and 18:40; the spring tides come after the full moon.",
    "fees.txt": "The harbour master collects mooring fees on Fridays.",
    "wick.txt": "The keeper trims the wick every evening at dusk and winds the clockwork that turns the lens.",
}


def config(state: Path, storage: str, vector_config: str = "{poll_s: 0.2}", inference: str = "") -> str:
    return f"""
name: hybrid
state_dir: {state}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: local-embeddings, provider_type: wordllama}}{inference}]
  files: [{{provider_id: local, provider_type: local}}]
  vector_stores: [{{provider_id: builtin, provider_type: builtin, config: {vector_config}}}]
{storage}
"""


class Stack:
    def __init__(self, client: openai.OpenAI, vectors: Callable[[int], int]) -> None:
        self.client = client
        self.vectors = vectors  # rows in the vector table of this size


def sqlite_vectors(db: Path) -> Callable[[int], int]:
    def count(dimension: int) -> int:
        import sqlean  # type: ignore[import-untyped]
        import sqlite_vec  # type: ignore[import-untyped]

        connection = sqlean.connect(db)
        connection.enable_load_extension(True)
        sqlite_vec.load(connection)
        try:
            return int(connection.execute(f"SELECT count(*) FROM vector_store_vectors_{dimension}").fetchone()[0])
        finally:
            connection.close()

    return count


def postgres_vectors(dsn: str) -> Callable[[int], int]:
    def count(dimension: int) -> int:
        import asyncio

        import asyncpg

        async def run() -> int:
            url = urlsplit(dsn)
            connection = await asyncpg.connect(host=parse_qs(url.query)["host"][0], user="postgres", database=url.path.lstrip("/"))
            try:
                return int(await connection.fetchval(f"SELECT count(*) FROM vector_store_vectors_{dimension}"))
            finally:
                await connection.close()

        return asyncio.run(run())

    return count


@pytest.fixture(scope="module", params=["sqlite-server", "sqlite-library", "pgvector-library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("hybrid")
    if request.param.startswith("sqlite"):
        (root / "run.yaml").write_text(config(root / "state", ""))
        mode = request.param.removeprefix("sqlite-")
        with open_target(f"{mode}:{root / 'run.yaml'}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            client = target.openai(max_retries=0, timeout=60)
            yield Stack(client, sqlite_vectors(root / "state" / "stack.db"))
            client.close()
        return
    # A short folder: the server's Unix socket path must stay under about 100 bytes.
    with tempfile.TemporaryDirectory(prefix="pgv") as pg_root, pgvector_database(pg_root) as dsn:
        storage = f"storage:\n  backends:\n    pg: {{type: postgres, dsn: \"{dsn}\"}}\n  stores: {{files: pg, vector_stores: pg}}"
        (root / "run.yaml").write_text(config(root / "state", storage))
        with LibraryClient(root / "run.yaml", env={}) as library:
            yield Stack(library.openai(max_retries=0), postgres_vectors(dsn))


def store_of_docs(client: openai.OpenAI, **extra: object) -> tuple[str, dict[str, str]]:
    ids = {name: upload(client, text.encode(), name) for name, text in DOCS.items()}
    store = client.vector_stores.create(name="coast", file_ids=list(ids.values()), extra_body=extra or None)
    wait_store(client, store.id)
    for file_id in ids.values():
        assert wait_done(client, store.id, file_id).status == "completed"
    return store.id, ids


def test_meaning_finds_a_chunk_that_shares_no_word_with_the_query(stack: Stack) -> None:
    client = stack.client
    store_id, ids = store_of_docs(client, embedding_model=MODEL)
    for query, name in (("warning signal mist", "fog.txt"), ("payment docking boats", "fees.txt"), ("lamp care nightly", "wick.txt")):
        assert client.vector_stores.search(vector_store_id=store_id, query=query, extra_body={"search_mode": "keyword"}).data == []
        for mode in ("hybrid", "vector"):
            hits = client.vector_stores.search(vector_store_id=store_id, query=query, extra_body={"search_mode": mode}).data
            assert hits[0].file_id == ids[name] and hits[0].content[0].text == DOCS[name], (query, mode)
            assert all(0 < hit.score <= 1 for hit in hits) and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        # hybrid is the default where a store has embeddings
        assert client.vector_stores.search(vector_store_id=store_id, query=query).data[0].file_id == ids[name]


def test_a_chunk_found_by_words_and_meaning_outranks_one_found_by_either(stack: Stack) -> None:
    client = stack.client
    store_id, ids = store_of_docs(client, embedding_model=MODEL)
    hybrid = client.vector_stores.search(vector_store_id=store_id, query="keeper horn in fog")
    vector = client.vector_stores.search(vector_store_id=store_id, query="keeper horn in fog", extra_body={"search_mode": "vector"})
    assert hybrid.data[0].file_id == ids["fog.txt"] and hybrid.data[0].score > vector.data[0].score * 0.5
    # the weights move the balance: all on the text, the scores are the keyword scores
    text_only = client.vector_stores.search(vector_store_id=store_id, query="keeper horn in fog", ranking_options={
        "hybrid_search": {"embedding_weight": 0, "text_weight": 1}})
    keyword = client.vector_stores.search(vector_store_id=store_id, query="keeper horn in fog", extra_body={"search_mode": "keyword"})
    assert [(h.file_id, h.score) for h in text_only.data] == [(h.file_id, h.score) for h in keyword.data]
    threshold = client.vector_stores.search(vector_store_id=store_id, query="warning signal mist",
                                            ranking_options={"score_threshold": 0.99})
    assert threshold.data == []


def test_filters_run_inside_the_vector_search(stack: Stack) -> None:
    client = stack.client
    store_id, ids = store_of_docs(client, embedding_model=MODEL)
    client.vector_stores.files.update(file_id=ids["wick.txt"], vector_store_id=store_id, attributes={"kind": "rules"})
    nearest = client.vector_stores.search(vector_store_id=store_id, query="warning signal mist", extra_body={"search_mode": "vector"})
    assert nearest.data[0].file_id == ids["fog.txt"] and ids["wick.txt"] in {hit.file_id for hit in nearest.data}
    hits = client.vector_stores.search(vector_store_id=store_id, query="warning signal mist", extra_body={"search_mode": "vector"},
                                       filters={"type": "eq", "key": "kind", "value": "rules"}).data
    assert [hit.file_id for hit in hits] == [ids["wick.txt"]]


def test_deleting_files_and_stores_removes_their_vectors(stack: Stack) -> None:
    client = stack.client
    before = stack.vectors(64) if _has_table(stack, 64) else 0
    store_id, ids = store_of_docs(client, embedding_model=MODEL, embedding_dimension=64)
    assert stack.vectors(64) == before + len(DOCS)
    client.vector_stores.files.delete(file_id=ids["fog.txt"], vector_store_id=store_id)
    assert stack.vectors(64) == before + len(DOCS) - 1
    hits = client.vector_stores.search(vector_store_id=store_id, query="warning signal mist", extra_body={"search_mode": "vector"}).data
    assert ids["fog.txt"] not in {hit.file_id for hit in hits}
    client.vector_stores.delete(store_id)
    assert stack.vectors(64) == before


def _has_table(stack: Stack, dimension: int) -> bool:
    try:
        stack.vectors(dimension)
        return True
    except Exception:
        return False


def test_a_store_without_embeddings_is_searched_by_keyword_and_refuses_vector_mode(stack: Stack) -> None:
    client = stack.client
    store_id, ids = store_of_docs(client)
    assert client.vector_stores.search(vector_store_id=store_id, query="warning signal mist").data == []
    assert client.vector_stores.search(vector_store_id=store_id, query="horn fog").data[0].file_id == ids["fog.txt"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.vector_stores.search(vector_store_id=store_id, query="horn", extra_body={"search_mode": "vector"})
    assert refused.value.body["param"] == "search_mode"  # type: ignore[index]


@pytest.mark.parametrize(("extra", "param"), [({"embedding_model": "no-such-model"}, "embedding_model"),
                                              ({"embedding_model": MODEL, "embedding_dimension": 300}, "embedding_dimension")])
def test_a_model_that_cannot_embed_is_refused_at_creation(stack: Stack, extra: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.vector_stores.create(name="x", extra_body=extra)
    assert refused.value.body["param"] == param  # type: ignore[index]


def test_a_default_embedding_model_in_run_yaml_embeds_every_new_store(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(config(tmp_path / "state", "", f"{{poll_s: 0.2, embedding_model: {MODEL}}}"))
    with LibraryClient(tmp_path / "run.yaml", env={}) as library:
        client = library.openai(max_retries=0)
        store_id, ids = store_of_docs(client)
        assert client.vector_stores.search(vector_store_id=store_id, query="payment docking boats").data[0].file_id == ids["fees.txt"]
        assert sqlite_vectors(tmp_path / "state" / "stack.db")(256) == len(DOCS)


def test_an_embedding_upstream_that_fails_fails_the_file_with_a_reason(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream:
        remote = f", {{provider_id: remote, provider_type: openai, config: {{base_url: \"{upstream.base_url}\", api_key: k}}}}"
        (tmp_path / "run.yaml").write_text(config(tmp_path / "state", "", inference=remote))
        with LibraryClient(tmp_path / "run.yaml", env={}) as library:
            client = library.openai(max_retries=0)
            store = client.vector_stores.create(name="x", extra_body={"embedding_model": "remote/fake-embed"})
            file_id = upload(client, b"A text the upstream refuses to embed [error:400].", "refused.txt")
            client.vector_stores.files.create(vector_store_id=store.id, file_id=file_id)
            failed = wait_done(client, store.id, file_id)
            assert failed.status == "failed" and failed.last_error is not None and failed.last_error.code == "server_error"
            assert "remote/fake-embed" in failed.last_error.message
            assert client.vector_stores.files.content(file_id=file_id, vector_store_id=store.id).data == []


@pytest.mark.postgres
def test_postgres_without_pgvector_is_a_start_up_error_that_says_how_to_get_it(tmp_path: Path) -> None:
    with fresh_database() as dsn:
        storage = f"storage:\n  backends:\n    pg: {{type: postgres, dsn: \"{dsn}\"}}\n  stores: {{files: pg, vector_stores: pg}}"
        (tmp_path / "run.yaml").write_text(config(tmp_path / "state", storage, f"{{embedding_model: {MODEL}}}"))
        with pytest.raises(Exception) as refused, LibraryClient(tmp_path / "run.yaml", env={}):
            pass
        assert "pgvector" in str(refused.value) and "apt install" in str(refused.value)


def test_rewrite_query_searches_the_questions_words_and_says_so(stack: Stack) -> None:
    client = stack.client
    store_id, ids = store_of_docs(client)
    page = client.vector_stores.search(vector_store_id=store_id, query="What does the keeper do in fog?", rewrite_query=True)
    assert page.search_query == ["keeper fog"] and page.data[0].file_id == ids["fog.txt"]
    assert client.vector_stores.search(vector_store_id=store_id, query="keeper fog").search_query == ["keeper fog"]
