"""Workers: requests/s of `stack run --workers 1` against `--workers 2` on this 2-core machine.

Starts the fake upstream and `stack run bench/stack-run.yaml --workers N` (SQLite state in a
temporary directory), every process free to use both cores (the upstream shares them with the
stack, as the issue asks), and measures, with the raw-asyncio keep-alive client of
bench/common.py, the throughput of plain chat completions and of stored responses at c=64 over a
fixed window, for N = 1 then N = 2. Errors are counted: a "database is locked" would be one.

    .venv/bin/python bench/workers.py [--duration 8] [--concurrency 64] [--repeats 2]

Target (issue 14): 2 workers at least 1.6 times 1 worker for stored responses.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    ROOT, STACK, cpu_per_request_us, free_port, measure_throughput, post, stack_env, start_unpinned_upstream, stop, wait_healthy,
)

RUN_YAML = ROOT / "bench" / "stack-run.yaml"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "[tokens:64] benchmark"}]}
RESPONSE = {"model": "fake-model", "input": "[tokens:64] benchmark"}


@dataclass
class Measured:
    rps: float
    errors: int
    stack_cpu_us: float  # CPU of the serving processes per request
    others_cpu_us: float  # CPU of the fake upstream and the load generator per request
    busy_percent: float  # CPU of every process measured, in percent of one core (both cores: 200)


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def measure(workers: int, duration: float, concurrency: int) -> dict[str, Measured]:
    with tempfile.TemporaryDirectory(prefix="stack-bench-workers-") as temp:
        logs = Path(temp)
        upstream, url = start_unpinned_upstream(logs)
        processes = [upstream]
        try:
            port = free_port()
            with (logs / "stack.log").open("ab") as sink:
                stack = subprocess.Popen([STACK, "run", str(RUN_YAML), "--port", str(port), "--workers", str(workers)], cwd=ROOT,
                                         env=stack_env(url, logs / "state"), stdout=sink, stderr=sink, start_new_session=True)
            processes.append(stack)
            await wait_healthy(port, "/v1/health", stack)
            await asyncio.sleep(1.5)  # every worker listening, not only the first
            # With several workers, `stack run` supervises them: they are its children.
            serving = _children(stack.pid) if workers > 1 else [stack.pid]
            pids = {"upstream": upstream.pid, **{f"worker {index}": pid for index, pid in enumerate(serving)}}
            results = {}
            for name, path, body, expect in (("chat", "/v1/chat/completions", CHAT, b'"chat.completion"'),
                                             ("stored responses", "/v1/responses", RESPONSE, b'"completed"')):
                measured = await measure_throughput(port, [post(port, path, body, expect)], concurrency, duration, 2.0, pids)
                stack_cpu = sum(cpu_per_request_us(measured, f"worker {index}") for index in range(len(serving)))
                busy = sum(measured.cpu_percent.values())  # of both cores: 200 %
                results[name] = Measured(measured.rps, measured.errors, stack_cpu,
                                         cpu_per_request_us(measured, "upstream") + measured.client_cpu_us, busy)
            return results
        finally:
            for process in reversed(processes):
                stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each worker count, interleaved; the median is kept")
    options = parser.parse_args()
    runs: dict[int, list[dict[str, Measured]]] = {1: [], 2: []}
    for _ in range(options.repeats):
        for workers in (1, 2):
            runs[workers].append(asyncio.run(measure(workers, options.duration, options.concurrency)))
            print(f"  ... {workers} worker(s): {runs[workers][-1]}", file=sys.stderr)
    print(f"c={options.concurrency}, {options.duration:g} s windows, median of {options.repeats}")
    print(f"{'measure':<22}{'1 worker':>14}{'2 workers':>14}{'ratio':>8}{'errors':>8}")
    for name in ("chat", "stored responses"):
        one = statistics.median(run[name].rps for run in runs[1])
        two = statistics.median(run[name].rps for run in runs[2])
        errors = sum(run[name].errors for count in runs.values() for run in count)
        print(f"{name:<22}{one:>12,.0f}/s{two:>12,.0f}/s{two / one:>8.2f}{errors:>8}")
    # Where the two cores went: the upstream and the load generator share them with the workers,
    # so 2 workers can reach at most 2 x stack / (stack + others) of 1 worker's rate (a worker
    # that costs less leaves a lower ceiling), and no more once both cores are busy.
    print(f"\n{'CPU a request (median)':<26}{'stack':>10}{'upstream+client':>17}{'both cores busy':>17}{'ceiling':>9}")
    for name in ("chat", "stored responses"):
        for workers in (1, 2):
            stack_us = statistics.median(run[name].stack_cpu_us for run in runs[workers])
            others_us = statistics.median(run[name].others_cpu_us for run in runs[workers])
            busy = statistics.median(run[name].busy_percent for run in runs[workers])
            ceiling = f"{2 * stack_us / (stack_us + others_us):.2f}" if workers == 1 else ""
            print(f"{name + f', {workers} worker(s)':<26}{stack_us:>8.0f}µs{others_us:>15.0f}µs{busy / 2:>16.0f}%{ceiling:>9}")


if __name__ == "__main__":
    main()
