"""Responses over one WebSocket connection against HTTP, for a chain of sequential turns (issue 15,
item 6). The stack of bench/stack-run.yaml in front of the fake upstream, each process on its own
core (bench/common.py), the openai SDK as the client on the third:

- WebSocket: one `client.responses.connect()` and `--turns` turns of a `store: false` chain, each
  continuing the last by `previous_response_id` (the connection keeps the context);
- HTTP: the same chain of streamed `POST /v1/responses` with `store: true` (HTTP can continue a
  chain only from a stored response), one keep-alive connection.

Each turn is timed from the request to its last event; the report gives the median per turn at
several depths of the chain, over `--repeats` chains of each kind (alternating), and the time to
open the WebSocket connection.

    .venv/bin/python bench/websocket.py [--turns 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench")]

from common import run_with_servers, wait_healthy  # noqa: E402

DEPTHS = (1, 10, 25, 50, 75, 100)
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def ws_chain(client: Any, turns: int) -> tuple[list[float], float]:
    opened = time.perf_counter()
    with client.responses.connect() as connection:
        setup = time.perf_counter() - opened
        previous = None
        times = []
        for turn in range(turns):
            start = time.perf_counter()
            connection.response.create(model="fake-model", input=f"[tokens:5] turn {turn}", store=False,
                                       **({"previous_response_id": previous} if previous else {}))
            for event in connection:
                if event.type in TERMINAL:
                    break
            if event.type != "response.completed":
                raise RuntimeError(f"turn {turn}: {event}")
            previous = event.response.id
            times.append(time.perf_counter() - start)
    return times, setup


def http_chain(client: Any, turns: int) -> list[float]:
    previous = None
    times = []
    for turn in range(turns):
        start = time.perf_counter()
        last = None
        for last in client.responses.create(model="fake-model", input=f"[tokens:5] turn {turn}", stream=True,
                                            **({"previous_response_id": previous} if previous else {})):
            pass
        assert last is not None and last.type == "response.completed", last
        previous = last.response.id
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()

    async def bench(servers: Any) -> dict[str, Any]:
        import openai

        await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{servers.stack_port}/v1", api_key="bench", max_retries=0)
        ws_chain(client, 5), http_chain(client, 5)  # warm-up
        ws: list[list[float]] = []
        http: list[list[float]] = []
        setups: list[float] = []
        for _ in range(options.repeats):
            times, setup = ws_chain(client, options.turns)
            ws.append(times)
            setups.append(setup)
            http.append(http_chain(client, options.turns))
        return {"ws": ws, "http": http, "setup": setups}

    run = run_with_servers(ROOT / "bench" / "stack-run.yaml", "websocket", bench)
    results = run.results
    print(f"a chain of {options.turns} turns (5 tokens each), median of {options.repeats} chains, ms from request to last event")
    print(f"{'turn':>6} {'WebSocket':>10} {'HTTP':>8} {'saved':>8}")
    for depth in (d for d in DEPTHS if d <= options.turns):
        ws = statistics.median(chain[depth - 1] for chain in results["ws"]) * 1000
        http = statistics.median(chain[depth - 1] for chain in results["http"]) * 1000
        print(f"{depth:>6} {ws:>10.2f} {http:>8.2f} {http - ws:>8.2f}")
    ws_all = statistics.median(t for chain in results["ws"] for t in chain) * 1000
    http_all = statistics.median(t for chain in results["http"] for t in chain) * 1000
    print(f"{'all':>6} {ws_all:>10.2f} {http_all:>8.2f} {http_all - ws_all:>8.2f}")
    print(f"WebSocket connection set-up: median {statistics.median(results['setup']) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
