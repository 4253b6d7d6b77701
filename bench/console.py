"""The web console's pages with 1,000 stored responses (issue 49: under 50 ms server-side): the
stack (core 0, the console on, auth off) in front of the fake upstream (core 1); 1,000 responses
stored through the API, then each page asked `--requests` times one after another, its time from
request to last byte on the loopback interface (the server's time, nothing else between).

    .venv/bin/python bench/console.py [--responses 1000] [--requests 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx2
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chat import MODEL  # noqa: E402
from common import ROOT, progress, running_servers, wait_healthy  # noqa: E402


async def store(port: int, count: int) -> str:
    async with AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0) as client:
        last = ""
        for start in range(0, count, 50):
            made = await asyncio.gather(*(client.responses.create(model=MODEL, input=f"[tokens:16] question {n}")
                                          for n in range(start, min(count, start + 50))))
            last = made[-1].id
    return last


def timed(port: int, path: str, requests: int) -> tuple[float, float, int]:
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}") as client:
        client.get(path)
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            answer = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1], answer.status_code


async def run(options: argparse.Namespace) -> None:
    with running_servers(ROOT / "bench/console-run.yaml", name="console") as servers:
        assert servers.stack is not None
        port, stack = servers.stack_port, servers.stack
        await wait_healthy(port, "/v1/health", stack)
        progress(f"storing {options.responses} responses")
        last = await store(port, options.responses)
        results = {path: timed(port, path, options.requests) for path in (
            "/console/", "/console/responses", f"/console/responses/{last}", "/console/playground")}
    for path, (p50, p95, status) in results.items():
        print(f"{path.replace(last, '{id}')}: p50 {p50:.1f} ms, p95 {p95:.1f} ms (status {status})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=50)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
