"""The Batch API (issue 48): what a batch's request costs the stack beyond a live one, what a
running batch does to interactive requests, and the stack's memory over a batch.

The fake upstream (core 1) and the stack (core 0, `bench/batches-run.yaml`):

1. Live: chat at c=32 for `--duration` s, the stack's CPU a request.
2. Interactive alone: chat at c=8, p50 and p99.
3. A batch of `--requests` chat requests (one JSONL file), timed from create to completed, the
   stack's CPU over it a request, with no other traffic.
4. Chat at c=8 while batches run one after another (p50, p99); the stack's resident memory before,
   at the first batch's peak, and after them all.

    .venv/bin/python bench/batches.py [--requests 10000] [--duration 4]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
from pathlib import Path

from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chat import MODEL, chat_request  # noqa: E402
from common import (  # noqa: E402
    ROOT, cpu_per_request_us, cpu_seconds, measure_throughput, progress,
    running_servers, wait_healthy,
)


def rss_mib(pid: int) -> float:
    for text in Path(f"/proc/{pid}/status").read_text().splitlines():
        if text.startswith("VmRSS:"):
            return int(text.split()[1]) / 1024
    return float("nan")


async def batch_run(port: int, pid: int, requests: int) -> tuple[float, float, float, str]:
    """Seconds from create to completed, stack CPU a request, peak RSS (MiB), final status."""
    lines = "\n".join(json.dumps({"custom_id": f"r{number}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": {"model": MODEL, "messages": [{"role": "user", "content": f"[tokens:16] request {number}"}]}})
                      for number in range(requests))
    async with AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=60) as client:
        upload = await client.files.create(file=("requests.jsonl", io.BytesIO(lines.encode())), purpose="batch")
        cpu, started, peak = cpu_seconds(pid), time.perf_counter(), rss_mib(pid)
        batch = await client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            await asyncio.sleep(0.2)
            peak = max(peak, rss_mib(pid))
            batch = await client.batches.retrieve(batch.id)
        elapsed, used = time.perf_counter() - started, cpu_seconds(pid) - cpu
    return elapsed, used / requests * 1e6, peak, f"{batch.status} {batch.request_counts}"


async def run(options: argparse.Namespace) -> None:
    with running_servers(ROOT / "bench/batches-run.yaml", name="batches") as servers:
        assert servers.stack is not None
        port, stack = servers.stack_port, servers.stack
        await wait_healthy(port, "/v1/health", stack)
        pids = {"stack": stack.pid}
        progress("live chat at c=32")
        live = await measure_throughput(port, [chat_request(port, False)], 32, options.duration, 1.0, pids)
        progress("interactive chat at c=8, alone")
        alone = await measure_throughput(port, [chat_request(port, False)], 8, options.duration, 1.0, pids)
        idle_rss = rss_mib(stack.pid)
        progress(f"a batch of {options.requests} requests")
        elapsed, per_request, peak, status = await batch_run(port, stack.pid, options.requests)
        progress("interactive chat at c=8 while batches run")
        measuring = True

        async def batches_meanwhile() -> int:
            ran = 0
            while measuring:
                await batch_run(port, stack.pid, options.requests)  # type: ignore[union-attr]
                ran += 1
            return ran

        running = asyncio.create_task(batches_meanwhile())
        await asyncio.sleep(1.0)
        beside = await measure_throughput(port, [chat_request(port, False)], 8, options.duration, 0.5, pids)
        measuring = False
        ran = await running
        after_rss = rss_mib(stack.pid)
    print(f"live chat at c=32: {cpu_per_request_us(live):.0f} µs of stack CPU a request, {live.rps:,.0f}/s")
    print(f"batch of {options.requests}: {status}, {elapsed:.1f} s ({options.requests / elapsed:,.0f}/s), "
          f"{per_request:.0f} µs of stack CPU a request ({per_request - cpu_per_request_us(live):+.0f} beyond a live one)")
    print(f"interactive chat at c=8: alone p50 {alone.p50_ms:.3f} p99 {alone.p99_ms:.3f} ms; beside a batch p50 {beside.p50_ms:.3f} "
          f"p99 {beside.p99_ms:.3f} ms ({(beside.p50_ms / alone.p50_ms - 1) * 100:+.0f} % p50)")
    print(f"stack RSS: {idle_rss:.0f} MiB before, {peak:.0f} MiB at the batch's peak, {after_rss:.0f} MiB after {ran + 1} batches")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=4.0)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
