"""The web console's pages with 1,000 stored responses (issue 49: under 50 ms server-side): the
stack (core 0, the console on, auth off) in front of the fake upstream (core 1); 1,000 responses
stored through the API, then each page asked `--requests` times one after another, its time from
request to last byte on the loopback interface (the server's time, nothing else between).

The usage page is asked over a busy quarter: `--pairs` principal-and-model pairs with counts in
every minute of two days, every hour of eight and every day of ninety (each size as long as the
server keeps it; written to the server's SQLite file first).

    .venv/bin/python bench/console.py [--responses 1000] [--requests 50] [--pairs 100]
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


async def busy_quarter(state_dir: Path, pairs: int) -> int:
    """Usage rows for `pairs` principal-and-model pairs, at each size as long as it is kept: every day
    of 90, every hour of 8, every minute of 2."""
    from builder.config import SqliteBackend, UsageConfig
    from runtime.security.usage import UsageLedger, usage_days, usage_hours, usage_minutes
    from runtime.storage import InsertRows, open_database

    db = open_database(SqliteBackend(type="sqlite", path=state_dir / "stack.db"))
    await UsageLedger(db, UsageConfig()).create_tables()
    now, written = int(time.time()) // 60, 0
    for table, step, span in ((usage_days, 1440, 90 * 1440), (usage_hours, 60, 8 * 1440), (usage_minutes, 1, 2 * 1440)):
        first = (now - span) // step * step
        for minute in range(first, now, step * 100):
            rows = [{"minute": at, "principal": f"user-{pair % 37}", "model": f"model-{pair % 5}-{pair}", "requests": 3,
                     "input_tokens": 300, "output_tokens": 90, "client_errors": 0, "server_errors": pair % 2}
                    for at in range(minute, min(now, minute + step * 100), step) for pair in range(pairs)]
            await db.write(InsertRows((table, rows)))
            written += len(rows)
    await db.close()
    return written


def state_dir_of(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return Path(next(entry for entry in environ if entry.startswith(b"BENCH_STATE_DIR=")).split(b"=", 1)[1].decode())


async def run(options: argparse.Namespace) -> None:
    with running_servers(ROOT / "bench/console-run.yaml", name="console") as servers:
        assert servers.stack is not None
        port, stack = servers.stack_port, servers.stack
        await wait_healthy(port, "/v1/health", stack)
        progress(f"storing {options.responses} responses")
        last = await store(port, options.responses)
        progress(f"writing a quarter of usage for {options.pairs} principal-and-model pairs")
        rows = await busy_quarter(state_dir_of(stack.pid), options.pairs)
        progress(f"{rows:,} usage rows")
        results = {path: timed(port, path, options.requests) for path in (
            "/console/", "/console/responses", f"/console/responses/{last}", "/console/playground", "/console/usage?range=1h",
            "/console/usage?range=24h", "/console/usage?range=7d", "/console/usage?range=90d&by=principal")}
    for path, (p50, p95, status) in results.items():
        print(f"{path.replace(last, '{id}')}: p50 {p50:.1f} ms, p95 {p95:.1f} ms (status {status})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=100)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
