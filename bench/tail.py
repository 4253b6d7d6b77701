"""The latency tail at c=1 (issue 50): thousands of requests one after another, their p50, p99,
p99.9 and max, and what the server was doing during the slow ones.

Starts the fake upstream (core 1) and `stack run` (core 0, bench/stack-run.yaml unless
`--run-yaml`) with `bench/probe/` on its PYTHONPATH: a sitecustomize that records each garbage
collection (generation, start, duration) on the monotonic clock this client times requests with.
Then, per kind (plain chat, streamed chat's first content, stored Responses), `--requests`
requests on one keep-alive connection, the client at real-time priority (bench/common.prompt_client),
and the upstream alone the same way as the floor. A request slower than p50 + 0.5 ms is "slow";
each slow one is matched with the collections that overlapped it.

    .venv/bin/python bench/tail.py [--requests 5000] [--kinds chat,stream,responses] [--run-yaml PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chat import chat_request  # noqa: E402
from common import ROOT, Reply, Request, connect, percentile, progress, prompt_client, running_servers, wait_healthy  # noqa: E402
from responses import create_response  # noqa: E402

SLOW_MS = 0.5  # over the p50: a request of the tail


async def timed(port: int, request: Request, count: int, warmup: int) -> list[tuple[float, float, float]]:
    """(started, ended, measured ms) of each request after the warm-up, one after another; a
    stream is measured to its first content."""
    conn = await connect(port)
    replies: list[Reply] = []
    for index in range(warmup + count):
        reply = await conn.exchange(request)
        if conn.closing:
            conn = await connect(port)
        if not reply.ok:
            raise RuntimeError(f"request {index} failed: {reply.status}")
        if index >= warmup:
            replies.append(reply)
    conn.close()
    return [(reply.started, reply.ended, ((reply.first or reply.ended) - reply.started) * 1000) for reply in replies]


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50": percentile(ordered, 0.5), "p90": percentile(ordered, 0.9), "p99": percentile(ordered, 0.99),
            "p99.9": percentile(ordered, 0.999), "max": ordered[-1], "count": len(ordered)}


def histogram(times: list[float]) -> list[tuple[str, int]]:
    """Counts in log-spaced buckets (HdrHistogram-like, 4 a doubling) from 0.1 ms."""
    bounds = [0.1 * 2 ** (step / 4) for step in range(0, 40)]
    counts = [0] * (len(bounds) + 1)
    for value in times:
        counts[next((at for at, bound in enumerate(bounds) if value <= bound), len(bounds))] += 1
    return [(f"≤{bound:.3g} ms" if at < len(bounds) else "more", count) for at, (bound, count) in
            enumerate(zip([*bounds, float("inf")], counts)) if count]


def causes(samples: list[tuple[float, float, float]], gcs: list[list[float]], p50: float) -> dict[str, Any]:
    """The slow requests, and how many overlapped a collection of each generation (and how long
    those collections took)."""
    slow = [sample for sample in samples if sample[2] > p50 + SLOW_MS]
    by_generation: dict[int, list[float]] = {}
    unexplained = 0
    for started, ended, _ in slow:
        overlapping = [event for event in gcs if event[0] < ended and event[0] + event[1] > started]
        if not overlapping:
            unexplained += 1
        for event in overlapping:
            by_generation.setdefault(int(event[2]), []).append(event[1] * 1000)
    during = [event for event in gcs if samples and samples[0][0] <= event[0] <= samples[-1][1]]
    origin = samples[0][0] if samples else 0.0
    return {"slow": len(slow), "unexplained": unexplained, "slow_at_s": [round(started - origin, 4) for started, _, _ in slow],
            "slow_during_gc": {gen: {"requests": len(ms), "gc_ms_p50": percentile(sorted(ms), 0.5), "gc_ms_max": max(ms)}
                               for gen, ms in sorted(by_generation.items())},
            "collections": {gen: sum(1 for event in during if event[2] == gen) for gen in (0, 1, 2)},
            "collection_ms_max": {gen: max((event[1] * 1000 for event in during if event[2] == gen), default=0.0) for gen in (0, 1, 2)}}


async def run(options: argparse.Namespace) -> dict[str, Any]:
    probe_file = Path(tempfile.mkstemp(prefix="stack-probe-", suffix=".json")[1])
    os.environ["PYTHONPATH"] = str(ROOT / "bench" / "probe")
    os.environ["BENCH_PROBE_FILE"] = str(probe_file)
    results: dict[str, Any] = {}
    with running_servers(options.run_yaml, name="tail") as servers:
        assert servers.stack is not None
        await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
        samples: dict[str, list[tuple[float, float, float]]] = {}
        with prompt_client():
            for kind in options.kinds:
                stack_request, floor_request = _requests(kind, servers.stack_port, servers.upstream_port)
                progress(f"{kind}: {options.requests} requests, the upstream alone then the stack")
                floor = await timed(servers.upstream_port, floor_request, options.requests // 2, 200)
                samples[kind] = await timed(servers.stack_port, stack_request, options.requests, 500)
                results[kind] = {"upstream": summary([ms for _, _, ms in floor]), "stack": summary([ms for _, _, ms in samples[kind]]),
                                 "histogram": histogram([ms for _, _, ms in samples[kind]])}
        servers.stack.send_signal(signal.SIGUSR2)  # the probe writes what it recorded
        time.sleep(0.5)
        gcs = json.loads(probe_file.read_text())["gc"] if probe_file.stat().st_size else []
    for kind, kind_samples in samples.items():
        results[kind]["causes"] = causes(kind_samples, gcs, results[kind]["stack"]["p50"])
    probe_file.unlink(missing_ok=True)
    return results


def _requests(kind: str, stack_port: int, upstream_port: int) -> tuple[Request, Request]:
    if kind == "chat":
        return chat_request(stack_port, False), chat_request(upstream_port, False)
    if kind == "stream":
        return chat_request(stack_port, True), chat_request(upstream_port, True)
    if kind == "responses":
        return create_response(stack_port, False), chat_request(upstream_port, False)
    raise SystemExit(f"unknown kind {kind!r}: chat, stream or responses")


def report(results: dict[str, Any]) -> None:
    for kind, result in results.items():
        stack, floor = result["stack"], result["upstream"]
        print(f"{kind} ({stack['count']} requests, c=1; ms)")
        print("  " + "  ".join(f"{name} {stack[name]:.3f} (upstream {floor[name]:.3f})" for name in ("p50", "p99", "p99.9", "max")))
        print(f"  p99 - p50: {stack['p99'] - stack['p50']:.3f} ms")
        found = result["causes"]
        print(f"  slow (> p50 + {SLOW_MS} ms): {found['slow']}, none during a collection: {found['unexplained']}; "
              f"during collections by generation: {found['slow_during_gc']}")
        print(f"  collections while measured: {found['collections']}, longest (ms): "
              + ", ".join(f"gen{gen} {ms:.2f}" for gen, ms in found["collection_ms_max"].items()))
        print("  histogram: " + ", ".join(f"{label} {count}" for label, count in result["histogram"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--kinds", type=lambda text: text.split(","), default=["chat", "stream", "responses"])
    parser.add_argument("--run-yaml", type=Path, default=ROOT / "bench" / "stack-run.yaml")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    results = asyncio.run(run(options))
    report(results)
    if options.json is not None:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
