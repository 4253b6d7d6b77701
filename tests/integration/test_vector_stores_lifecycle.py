"""Ingestion survives the server: a kill -9 mid-ingestion leaves a file that the next server takes
up at start-up (its worker's process is gone: no need to wait for the lease, a minute here), and
finishes with no chunk written twice."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import openai

from fake_upstream.server import FakeUpstream
from runtime.testing.targets import free_port
from support.live import healthy, live_env, start_server, wait_for

WORDS = "keeper lamp wick fog horn tide quay mooring lens clockwork dusk dawn harbour beacon signal gale".split()
# About 8 MB of text: seconds of ingestion, so a stop lands in the middle of it.
LOG = "\n".join(" ".join(WORDS[(line + i) % len(WORDS)] for i in range(12)) + f" line{line}." for line in range(120_000)).encode()


def _ingesting(upstream: FakeUpstream, tmp_path: Path) -> tuple[dict[str, str], int, openai.OpenAI]:
    """The environment (a minute-long ingestion lease), the port and a client of a server to start."""
    port = free_port()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    # Attaching answers at once: the test stops the server while the file is being ingested.
    return live_env(upstream, tmp_path, STACK_TEST_INGEST_LEASE_S="60", STACK_TEST_ATTACH_WAIT_S="0"), port, client


def test_an_ingestion_cut_by_kill_9_is_finished_by_the_next_server(upstream: FakeUpstream, tmp_path: Path) -> None:
    env, port, client = _ingesting(upstream, tmp_path)
    base = str(client.base_url).rstrip("/")
    first = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        file_id = client.files.create(file=("log.txt", LOG), purpose="assistants").id
        small = client.files.create(file=("small.txt", b"The beacon is lit at dusk."), purpose="assistants").id
        store = client.vector_stores.create(file_ids=[file_id])
        wait_for(lambda: client.vector_stores.files.retrieve(file_id, vector_store_id=store.id).status == "in_progress")
        time.sleep(0.3)  # well into the file, not through it
        assert client.vector_stores.files.retrieve(file_id, vector_store_id=store.id).status == "in_progress"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        client.vector_stores.files.create(vector_store_id=store.id, file_id=small)
        wait_for(lambda: client.vector_stores.files.retrieve(small, vector_store_id=store.id).status == "completed")
        wait_for(lambda: client.vector_stores.files.retrieve(file_id, vector_store_id=store.id).status != "in_progress", timeout=30)
        done = client.vector_stores.files.retrieve(file_id, vector_store_id=store.id)
        assert done.status == "completed" and done.last_error is None
        # Ingested again from scratch into another store: the same chunks, none twice.
        again = client.vector_stores.create(file_ids=[file_id])
        wait_for(lambda: client.vector_stores.retrieve(again.id).status == "completed", timeout=60)
        resumed = [part.text for part in client.vector_stores.files.content(file_id=file_id, vector_store_id=store.id)]
        fresh = [part.text for part in client.vector_stores.files.content(file_id=file_id, vector_store_id=again.id)]
        assert len(resumed) == len(fresh) > 100 and resumed == fresh
        assert done.usage_bytes == client.vector_stores.files.retrieve(file_id, vector_store_id=again.id).usage_bytes
        hits = client.vector_stores.search(vector_store_id=store.id, query="line119999").data
        assert hits and "line119999" in hits[0].content[0].text
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)


def test_a_graceful_stop_mid_ingestion_gives_the_file_up_for_the_next_process(upstream: FakeUpstream, tmp_path: Path) -> None:
    """SIGTERM mid-ingestion: the file stays `in_progress` with no lease held, so the next process
    (here the next start; on a shared database any replica) takes it up at once."""
    env, port, client = _ingesting(upstream, tmp_path)
    base = str(client.base_url).rstrip("/")
    first = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        file_id = client.files.create(file=("log.txt", LOG), purpose="assistants").id
        store = client.vector_stores.create(file_ids=[file_id])
        time.sleep(0.3)
        assert client.vector_stores.files.retrieve(file_id, vector_store_id=store.id).status == "in_progress"
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
    with sqlite3.connect(tmp_path / "integration" / "stack.db") as db:
        assert db.execute("SELECT status, lease_owner, lease_until FROM vector_store_files").fetchall() == [("in_progress", None, None)]
    second = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        wait_for(lambda: client.vector_stores.files.retrieve(file_id, vector_store_id=store.id).status == "completed", timeout=30)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)
