"""One model on three deployments (issue 47): what the routing layer costs, and what a client sees
when a deployment dies.

Three fake upstreams (processes, on core 1) and the stack (`bench/deployments-run.yaml`, on core 0):

1. Cost: c=32 windows alternating between `direct` (one provider: the path of a model without
   deployments), `layer` (three deployments that are all `direct`'s upstream: the layer's cost
   alone), `pool` (three deployments on three upstreams, least_outstanding) and `sticky`
   (prefix_affinity), the stack's CPU a request in each.
2. Failover: c=1 p50 and p99 of `pool` with its three deployments up, then with one of them killed
   (connection refused: the attempt on it fails, the next one answers, until its circuit opens).
3. A deployment killed mid-run: `pool` at c=32, upstream 1 killed a third of the way in; requests
   a second, errors and p99 before and after.
4. Affinity: sessions of several turns (each turn sends the conversation so far, as a chat client or
   a Responses chain does) on `sticky`, eight at a time: the share of each session's turns answered
   by the deployment that answered its first (`x-stack-deployment`).
5. The prefix index's memory at 100,000 distinct prefixes (in this process, tracemalloc).

    .venv/bin/python bench/deployments.py [--duration 4] [--windows 3] [--sessions 60] [--turns 6]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (  # noqa: E402
    ROOT, STACK, STACK_CORE, UPSTREAM_CORE, cpu_per_request_us, free_port, measure_throughput, percentile, post, progress,
    read_listening_url, sample_latency, spawn, stop, wait_healthy,
)

EXPECT = b'"chat.completion"'


def chat(port: int, model: str) -> object:
    return post(port, "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "[tokens:16] bench"}]}, EXPECT)


async def cost(port: int, pids: dict[str, int], duration: float, windows: int) -> dict[str, list[float]]:
    measured: dict[str, list[float]] = {"direct": [], "layer": [], "pool": [], "sticky": []}
    for window in range(windows):
        for model in measured:
            progress(f"cost: {model}, window {window + 1} of {windows}")
            result = await measure_throughput(port, [chat(port, model)], 32, duration, 1.0, pids)  # type: ignore[list-item]
            measured[model].append(cpu_per_request_us(result))
    return measured


async def failover(port: int, upstreams: list[subprocess.Popen[bytes]]) -> tuple[tuple[float, float], tuple[float, float]]:
    progress("failover: c=1, all up")
    up = await sample_latency(port, chat(port, "pool"), 600, 50)  # type: ignore[arg-type]
    stop(upstreams[2])
    progress("failover: c=1, one deployment killed")
    down = await sample_latency(port, chat(port, "pool"), 600, 0)  # type: ignore[arg-type]
    return (percentile(up.totals, 0.5), percentile(up.totals, 0.99)), (percentile(down.totals, 0.5), percentile(down.totals, 0.99))


async def killed_mid_run(port: int, pids: dict[str, int], upstream: subprocess.Popen[bytes], duration: float) -> tuple[object, object]:
    progress("a deployment killed mid-run")
    before = await measure_throughput(port, [chat(port, "pool")], 32, duration, 1.0, pids)  # type: ignore[list-item]

    async def kill_soon() -> None:
        await asyncio.sleep(0.2)
        upstream.send_signal(signal.SIGKILL)

    killer = asyncio.create_task(kill_soon())
    after = await measure_throughput(port, [chat(port, "pool")], 32, duration, 0.0, pids)  # type: ignore[list-item]
    await killer
    return before, after


async def affinity(port: int, sessions: int, turns: int) -> list[float]:
    """The share of each session's turns on the deployment of its first turn."""
    shares: list[float] = []
    gate = asyncio.Semaphore(8)
    async with AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=30, max_retries=0) as client:

        async def session(number: int) -> None:
            async with gate:
                messages = [{"role": "system", "content": f"You are assistant number {number}. " * 20}]
                served: list[str] = []
                for turn in range(turns):
                    messages.append({"role": "user", "content": f"[tokens:8] question {turn} of session {number}"})
                    raw = await client.chat.completions.with_raw_response.create(model="sticky", messages=messages)  # type: ignore[arg-type]
                    served.append(raw.headers["x-stack-deployment"])
                    messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content or ""})
                shares.append(served.count(served[0]) / len(served))

        await asyncio.gather(*(session(number) for number in range(sessions)))
    return shares


def index_memory(prefixes: int = 100_000) -> float:
    """MiB held by a prefix_affinity index of `prefixes` distinct prefixes."""
    from builder.models import DeploymentConfig, RoutingConfig
    from runtime.apis.inference.balancer import Balancer

    balancer = Balancer("m", [DeploymentConfig(provider_id=f"p{index}") for index in range(3)],
                        RoutingConfig(strategy="prefix_affinity", prefix_index_size=prefixes))
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for number in range(prefixes):
        deployment = balancer.pick([], [hash(("prefix", number))])
        assert deployment is not None
        balancer.released(deployment)
    held = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    return held / 2**20


async def run(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="stack-bench-deployments-") as temp:
        logs = Path(temp)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
        upstreams = [spawn([sys.executable, "-m", "fake_upstream", "--port", "0"], UPSTREAM_CORE, env, logs / f"up{index}.log",
                           stdout=subprocess.PIPE) for index in range(3)]
        stack = None
        try:
            urls = [read_listening_url(upstream) for upstream in upstreams]
            port = free_port()
            stack_env = dict(os.environ, BENCH_STATE_DIR=str(logs / "state"), STACK_RECORDING_MODE="live", STACK_LOG_LEVEL="WARNING",
                             **{f"BENCH_UPSTREAM_URL_{index}": f"{url}/v1" for index, url in enumerate(urls)})
            stack = spawn([STACK, "run", str(ROOT / "bench/deployments-run.yaml"), "--port", str(port)], STACK_CORE, stack_env,
                          logs / "stack.log")
            await wait_healthy(port, "/v1/health", stack)
            pids = {"stack": stack.pid}
            costs = await cost(port, pids, options.duration, options.windows)
            shares = await affinity(port, options.sessions, options.turns)
            before, after = await killed_mid_run(port, pids, upstreams[1], options.duration)
            healthy, degraded = await failover(port, upstreams)
        finally:
            for process in [*(p for p in [stack] if p is not None), *upstreams]:
                stop(process)
    print("c=32 stack CPU a request (median of the windows; each window):")
    for model, values in costs.items():
        print(f"  {model}: {statistics.median(values):.0f} µs; {' '.join(f'{value:.0f}' for value in values)}")
    print(f"affinity: {len(shares)} sessions of {options.turns} turns, share on their first deployment: "
          f"mean {statistics.mean(shares):.3f}, min {min(shares):.3f}")
    print(f"killed mid-run (pool, c=32): before {before.rps:,.0f}/s p99 {before.p99_ms:.2f} ms errors {before.errors}; "  # type: ignore[attr-defined]
          f"after {after.rps:,.0f}/s p99 {after.p99_ms:.2f} ms errors {after.errors}")  # type: ignore[attr-defined]
    print(f"failover at c=1 (pool): all up p50 {healthy[0]:.3f} p99 {healthy[1]:.3f} ms; one down p50 {degraded[0]:.3f} "
          f"p99 {degraded[1]:.3f} ms")
    print(f"prefix index at 100,000 prefixes: {index_memory():.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=6)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
