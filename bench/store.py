"""The response store alone, in process: CPU and wall time of a stored streamed response's two writes
(or, with `--background`, of a background response's writes).

A streamed, stored response is written twice: `ResponseStore.insert` when it is created (the row
and its input item) and `ResponseStore.finish` when it ends (status, the whole response, its output
item). This script runs that pair against a fresh SQLite file (or a PostgreSQL DSN), one pair at a
time (c=1) and 32 at once (c=32, where SQLite's group commit shares commits and thread hops), and
prints CPU and wall time per pair. CPU counts every thread of the process (the SQLite writer's too).
No server, no HTTP: this isolates the storage layer's cost from the rest of a request.

A background response is written more often (providers/responses/background.py): inserted `queued`
with its request, set `in_progress` when its task starts, its events logged in batches (each batch
announced to followers), and finished only if still `in_progress`. `--background` times that
sequence, with the events in three batches as a one-message answer logs them.

    .venv/bin/python bench/store.py [--pairs 3200] [--dsn postgresql://...] [--background]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.config import PostgresBackend, SqliteBackend  # noqa: E402
from providers.responses.store import ResponseStore  # noqa: E402
from contract.items import new_id  # noqa: E402
from runtime.storage import open_database  # noqa: E402

ANSWER = " ".join(f"tok{index}" for index in range(64))  # the 64-token answer of bench/responses.py


def response(status: str) -> dict[str, Any]:
    return {
        "id": new_id("resp"), "object": "response", "created_at": time.time(), "status": status, "background": False,
        "model": "fake-model", "output": [], "usage": None, "metadata": {}, "store": True, "tools": [],
        "text": {"format": {"type": "text"}}, "instructions": None, "error": None,
    }


async def write_pair(store: ResponseStore) -> None:
    created = response("in_progress")
    user = [{"id": new_id("msg"), "type": "message", "role": "user", "content": [{"type": "input_text", "text": "[tokens:64] benchmark"}]}]
    await store.insert(dict(created), ancestors=[], input_items=user)
    output = [{"id": new_id("msg"), "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": ANSWER, "annotations": [], "logprobs": []}]}]
    await store.finish({**created, "status": "completed", "output": output}, output)


async def write_background(store: ResponseStore) -> None:
    queued = {**response("queued"), "background": True}
    user = [{"id": new_id("msg"), "type": "message", "role": "user", "content": [{"type": "input_text", "text": "[tokens:64] benchmark"}]}]
    await store.insert(dict(queued), ancestors=[], input_items=user, request={"model": "fake-model", "input": "benchmark", "background": True})
    started = {**queued, "status": "in_progress"}
    if not await store.set_status(started["id"], "in_progress", started, only_if_status=["queued"]):
        raise RuntimeError("the queued response was not found")
    message = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": ANSWER, "annotations": [], "logprobs": []}]}
    batches = [
        [{"type": "response.created", "response": started}, {"type": "response.in_progress", "response": started}],
        [{"type": "response.output_item.added", "output_index": 0, "item": {**message, "content": []}}],
        [{"type": "response.output_text.done", "text": ANSWER}, {"type": "response.output_item.done", "item": message}],
    ]
    number = 0
    for batch in batches:
        for event in batch:
            event["sequence_number"], number = number, number + 1
        await store.append_events(started["id"], batch)
    if not await store.finish({**started, "status": "completed", "output": [message]}, [message], only_if_status=["in_progress"]):
        raise RuntimeError("the response was not finished")


async def measure(store: ResponseStore, pairs: int, concurrency: int, background: bool = False) -> tuple[float, float]:
    """(CPU µs, wall µs) per pair (per background response)."""
    rounds = max(1, pairs // concurrency)
    write = write_background if background else write_pair
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(write(store) for _ in range(concurrency)))
    done = rounds * concurrency
    return (time.process_time() - cpu) / done * 1e6, (time.perf_counter() - wall) / done * 1e6


async def run(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="stack-bench-store-") as temp:
        backend: SqliteBackend | PostgresBackend = (
            PostgresBackend(type="postgres", dsn=options.dsn, pool_size=40) if options.dsn
            else SqliteBackend(type="sqlite", path=Path(temp) / "stack.db")
        )
        db = open_database(backend)
        store = ResponseStore(db)
        await store.create_tables()
        try:
            await measure(store, 200, 1, options.background)  # warm-up: connections, compiled statements
            what, unit = ("a background response's writes", "response") if options.background else ("ResponseStore.insert + finish", "pair")
            print(f"{what}, {backend.type}, {options.pairs} {unit}s")
            for concurrency in (1, 32):
                cpu, wall = await measure(store, options.pairs, concurrency, options.background)
                print(f"c={concurrency:<3} CPU {cpu:7.0f} µs/{unit}   wall {wall:7.0f} µs/{unit}")
        finally:
            await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3200, help="insert+finish pairs per measurement")
    parser.add_argument("--dsn", help="a PostgreSQL DSN to measure instead of a fresh SQLite file")
    parser.add_argument("--background", action="store_true", help="a background response's writes instead of the pair")
    options = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(options))
    else:
        uvloop.run(run(options))


if __name__ == "__main__":
    main()
