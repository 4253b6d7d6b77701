"""Start-up cost: `stack --help` time, time from `stack run starter` to a 200 on /v1/health,
and the idle server's resident memory. Targets: 0.3 s, 1 s, 100 MiB.

    .venv/bin/python bench/startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import compile_project  # noqa: E402

STACK = str(Path(sys.executable).with_name("stack"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def time_help() -> float:
    start = time.perf_counter()
    subprocess.run([STACK, "--help"], check=True, capture_output=True)
    return time.perf_counter() - start


def time_to_health(env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawn to the first 200 on /v1/health, and RSS (MiB) after 2 s idle."""
    port = free_port()
    start = time.perf_counter()
    process = subprocess.Popen([STACK, "run", "starter", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/v1/health"
        while True:
            try:
                if httpx2.get(url, timeout=0.5).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if process.poll() is not None or time.perf_counter() - start > 30:
                raise RuntimeError("server did not start")
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        time.sleep(2)
        return elapsed, rss_mib(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compile_project()
    env = dict(os.environ, STACK_STATE_DIR=tempfile.mkdtemp(prefix="stack-bench-"), STACK_LOG_LEVEL="WARNING")
    helps = [time_help() for _ in range(args.runs)]
    starts = [time_to_health(env) for _ in range(args.runs)]
    print(f"stack --help          median {statistics.median(helps) * 1000:7.1f} ms   (target < 300 ms)")
    print(f"run starter -> health median {statistics.median(s for s, _ in starts) * 1000:7.1f} ms   (target < 1000 ms)")
    print(f"idle server RSS       median {statistics.median(r for _, r in starts):7.1f} MiB  (target < 100 MiB)")


if __name__ == "__main__":
    main()
