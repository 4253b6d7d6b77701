"""Vector stores: ingestion throughput and search latency as the store grows, on SQLite and PostgreSQL.

In-process (the library client, through the openai SDK), so the numbers are the stack's own work:

- ingestion: 1,000 documents of about 1 KiB each (1 MiB of text in all) uploaded, attached in two
  file batches, timed from the first batch to the store's `completed`: documents per second;
- search p50/p95 (a `POST /v1/vector_stores/{id}/search` of three words from the corpus' vocabulary,
  `max_num_results` 10) on that store (about 1,000 chunks) and on a store of 100,000 chunks seeded
  straight into the tables (ingesting 100,000 chunks through the API would take the benchmark's whole
  budget; the rows are the same as ingestion writes);
- search p50 with an attribute filter, at 100,000 chunks;
- with `--mode hybrid`, the same with the stores embedded by a local model (wordllama, 256
  dimensions, in process; the `local` extra): ingestion then embeds every chunk, the big store's
  chunks are seeded with their vectors, and searches are hybrid (vector and keyword, fused). On
  PostgreSQL this needs pgvector, so the database is a `pgserver` one (PostgreSQL 16 with pgvector,
  from PyPI) rather than the machine's server;
- a response whose model calls `file_search` on the 1,000-chunk store (two model calls, answered at
  once by the fake upstream of tests/fake_upstream, and a search) beside two plain responses: what the
  search and the tool loop add.

    .venv/bin/python bench/vector_stores.py [--backend sqlite|postgres|both] [--mode keyword|hybrid|both] [--chunks 100000]
                                            [--searches 200] [--json PATH]

PostgreSQL: keyword mode, a fresh database on the server at 127.0.0.1:5432, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from runtime.library_client import LibraryClient  # noqa: E402

RANDOM = random.Random(7)
VOCABULARY = [f"{RANDOM.choice('bcdfghklmnprstvz')}{RANDOM.choice('aeiou')}{RANDOM.choice('lmnrst')}{RANDOM.choice('aeiou')}"
              f"{RANDOM.choice('bcdfgklmnprst')}{i}" for i in range(5000)]
WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCABULARY))]  # Zipf: a few words common, most rare


def words(count: int) -> str:
    return " ".join(RANDOM.choices(VOCABULARY, WEIGHTS, k=count))


EMBEDDING_MODEL = "wordllama-l2-supercat"


def config(tmp: Path, dsn: str | None, upstream: str, hybrid: bool) -> Path:
    storage = f'storage:\n  backends:\n    pg: {{type: postgres, dsn: "{dsn}"}}\n  stores: {{files: pg, vector_stores: pg}}\n' if dsn else ""
    embeddings = ", {provider_id: local-embeddings, provider_type: wordllama}" if hybrid else ""
    path = tmp / "run.yaml"
    path.write_text(f"""
name: bench-vector-stores
state_dir: {tmp / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: "{upstream}", api_key: k}}}}{embeddings}]
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  tool_runtime: [{{provider_id: file_search, provider_type: file_search}}]
  files: [{{provider_id: local, provider_type: local}}]
  vector_stores: [{{provider_id: builtin, provider_type: builtin, config: {{poll_s: 0.2, ingestion_workers: 2}}}}]
{storage}""")
    return path


def p50_ms(call: Any, count: int) -> float:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def timed_searches(client: Any, store_id: str, count: int, **extra: Any) -> tuple[float, float]:
    samples = []
    for _ in range(count):
        query = " ".join(RANDOM.choices(VOCABULARY[:2000], k=3))
        start = time.perf_counter()
        client.vector_stores.search(vector_store_id=store_id, query=query, max_num_results=10, **extra)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


def seed(stack: LibraryClient, store_id: str, chunk_count: int) -> None:
    """Rows as ingestion writes them: 1,000 completed files of chunk_count/1,000 chunks each (with
    their vectors, for a store with an embedding model)."""
    from contract.spec import Api
    from providers.vector_stores.builtin.embedding import model_of
    from providers.vector_stores.builtin.ingest import insert_chunks
    from providers.vector_stores.builtin.tables import columns, files, row_of, stores
    from providers.vector_stores.builtin.vectors import insert_vectors
    from runtime.storage import Sql, insert_rows

    provider = stack.stack.impls[Api.vector_stores]
    db = provider.db
    per_file = chunk_count // 1000

    async def run() -> None:
        found = await db.read_one(Sql(f"SELECT {columns(stores)} FROM vector_stores WHERE id = :id"), {"id": store_id})
        assert found is not None
        model = model_of(row_of(stores, found))
        for index in range(1000):
            attempt = uuid.uuid4().hex[:12]
            file_row = {"vector_store_id": store_id, "file_id": f"file-seed{index}", "filename": f"seed{index}.txt", "created_at": 0,
                        "status": "completed", "last_error": None, "usage_bytes": 0, "attributes": {"shard": index % 10},
                        "chunk_tokens": 800, "overlap_tokens": 400, "batch_id": None, "attempt": attempt, "lease_owner": None,
                        "lease_until": None}
            rows = [{"vector_store_id": store_id, "file_id": f"file-seed{index}", "attempt": attempt, "position": position,
                     "text": words(120)} for position in range(per_file)]

            vectors = await model.embed(provider.inference, [row["text"] for row in rows]) if model else None

            def write(conn: Any, file_row: dict[str, Any] = file_row, rows: list[dict[str, Any]] = rows, vectors: Any = vectors) -> None:
                insert_rows(conn, files, [file_row])
                seqs = insert_chunks(conn, rows)
                if model is not None:
                    insert_vectors(conn, db.dialect, model.dimension, store_id, seqs, vectors)

            await db.write(write)
        # As autovacuum would within its naptime (a minute) of so many new rows: the planner
        # needs the table's statistics to take the full-text index.
        await db.write_one(Sql("ANALYZE"))

    stack._running_loop().run(run(), timeout=3600)


def measure(backend: str, mode: str, chunk_count: int, searches: int) -> dict[str, Any]:
    from fake_upstream.server import running_fake_upstream
    from support.postgres import fresh_database, pgvector_database

    hybrid = mode == "hybrid"
    extra = {"extra_body": {"embedding_model": EMBEDDING_MODEL}} if hybrid else {}
    with tempfile.TemporaryDirectory(prefix="vsb") as tmp_dir:
        tmp = Path(tmp_dir)
        if backend == "postgres":
            context = pgvector_database(str(tmp)) if hybrid else fresh_database()
        else:
            from contextlib import nullcontext
            context = nullcontext(None)
        with context as dsn, running_fake_upstream() as upstream, LibraryClient(config(tmp, dsn, upstream.base_url, hybrid), env={}) as stack:
            client = stack.openai(max_retries=0)
            ids = [client.files.create(file=(f"doc{i}.txt", io.BytesIO(words(120).encode())), purpose="assistants").id for i in range(1000)]
            size = sum(client.files.retrieve(file_id).bytes for file_id in ids[:50]) * 20
            store = client.vector_stores.create(name="ingest", **extra)
            start = time.perf_counter()
            for half in (ids[:500], ids[500:]):
                client.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=half)
            while client.vector_stores.retrieve(store.id).status == "in_progress":
                time.sleep(0.02)
            ingest_s = time.perf_counter() - start
            counts = client.vector_stores.retrieve(store.id).file_counts
            assert counts.completed == 1000, counts
            small_p50, small_p95 = timed_searches(client, store.id, searches)
            tools = [{"type": "file_search", "vector_store_ids": [store.id]}]

            def with_search() -> None:
                ask = f'[tool:file_search {{"queries": ["{" ".join(RANDOM.choices(VOCABULARY[:2000], k=3))}"]}}] [answer {{"text": "ok [1]."}}]'
                client.responses.create(model="fake-model", input=ask, tools=tools)  # type: ignore[arg-type]

            searched_p50 = p50_ms(with_search, 50)
            plain_p50 = p50_ms(lambda: client.responses.create(model="fake-model", input="[tokens:2] hello"), 50)
            big = client.vector_stores.create(name="big", **extra)
            seed_start = time.perf_counter()
            seed(stack, big.id, chunk_count)
            seed_s = time.perf_counter() - seed_start
            big_p50, big_p95 = timed_searches(client, big.id, searches)
            filtered_p50, _ = timed_searches(client, big.id, searches, filters={"type": "eq", "key": "shard", "value": 3})
    return {"backend": backend, "mode": mode, "documents": 1000, "text_bytes": size, "ingest_s": round(ingest_s, 2),
            "documents_per_s": round(1000 / ingest_s, 1), "search_p50_ms_1k": round(small_p50, 2), "search_p95_ms_1k": round(small_p95, 2),
            "chunks": chunk_count, "seed_s": round(seed_s, 1), "search_p50_ms_big": round(big_p50, 2), "search_p95_ms_big": round(big_p95, 2),
            "filtered_search_p50_ms_big": round(filtered_p50, 2), "file_search_response_p50_ms": round(searched_p50, 2),
            "two_plain_responses_p50_ms": round(2 * plain_p50, 2), "file_search_added_ms": round(searched_p50 - 2 * plain_p50, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--mode", choices=["keyword", "hybrid", "both"], default="both")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    backends = ["sqlite", "postgres"] if options.backend == "both" else [options.backend]
    modes = ["keyword", "hybrid"] if options.mode == "both" else [options.mode]
    results = [measure(backend, mode, options.chunks, options.searches) for backend in backends for mode in modes]
    for result in results:
        print(json.dumps(result))
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
