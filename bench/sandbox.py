"""The bubblewrap sandboxes: start-up, a cell's round trip, a data cell, an idle kernel's memory,
and 8 sandboxes at once on the machine's cores. Needs bwrap and the runtime venv (`stack sandbox setup`).

    .venv/bin/python bench/sandbox.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from builder.sandbox_venv import default_venv, venv_python
from providers.sandboxes.bubblewrap import BubblewrapConfig, BubblewrapSandboxes, open_backend

DATA_CELL = """
import numpy as np, pandas as pd, matplotlib.pyplot as plt
frame = pd.DataFrame({"x": np.arange(1000), "y": np.random.default_rng(0).normal(size=1000).cumsum()})
frame.plot(x="x", y="y")
frame.describe()
"""


async def timed(backend: BubblewrapSandboxes, sandbox_id: str, code: str) -> float:
    start = time.perf_counter()
    output = await backend.run(sandbox_id, code)
    assert output.status == "completed", output.logs
    return time.perf_counter() - start


def kernels_rss_mib() -> list[float]:
    """RSS of each kernel process (the interpreter running the driver; bwrap's two processes are a few hundred KiB more)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = status.read_bytes().split(b"\0")
            if command[0].endswith(b"python") and b"/opt/stack/kernel.py" in command:
                for line in (status.parent / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        found.append(int(line.split()[1]) / 1024)
        except (OSError, IndexError):
            continue
    return found


async def main(runs: int) -> None:
    config = BubblewrapConfig(python=venv_python(default_venv()))
    async with open_backend(config, Path(tempfile.mkdtemp(prefix="stack-bench-sandbox-"))) as backend:
        await backend.create("bench", 1 << 30)
        starts = []
        for _ in range(runs):
            await backend.stop("bench")
            starts.append(await timed(backend, "bench", "1"))
        trips = [await timed(backend, "bench", "print(1)") for _ in range(runs * 10)]
        await backend.stop("bench")
        first_data = await timed(backend, "bench", DATA_CELL)
        data = [await timed(backend, "bench", DATA_CELL) for _ in range(runs)]
        await backend.stop("bench")
        await timed(backend, "bench", "1")
        idle = kernels_rss_mib()
        await backend.run("bench", "import numpy, pandas, matplotlib.pyplot")
        loaded = kernels_rss_mib()
        ids = [f"c{index}" for index in range(8)]
        for sandbox_id in ids:
            await backend.create(sandbox_id, 1 << 30)
        start = time.perf_counter()
        await asyncio.gather(*(timed(backend, sandbox_id, "sum(range(10**6))") for sandbox_id in ids))
        cold8 = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(timed(backend, sandbox_id, "sum(range(10**6))") for sandbox_id in ids))
        warm8 = time.perf_counter() - start
        alone = statistics.median([await timed(backend, "c0", "sum(range(10**6))") for _ in range(runs)])
    ms = 1000
    print(f"sandbox start (bwrap + kernel ready + a cell)  p50 {statistics.median(starts) * ms:7.1f} ms")
    print(f"print(1) cell round trip                       p50 {statistics.median(trips) * ms:7.2f} ms")
    print(f"pandas+matplotlib cell, fresh kernel               {first_data * ms:7.0f} ms (imports, font cache)")
    print(f"pandas+matplotlib cell, warm kernel            p50 {statistics.median(data) * ms:7.1f} ms")
    print(f"idle kernel RSS                                    {max(idle):7.1f} MiB (after numpy+pandas+pyplot: {max(loaded):.1f} MiB)")
    print(f"8 sandboxes, a sum(range(10**6)) cell each      cold {cold8 * ms:7.0f} ms, warm {warm8 * ms:5.0f} ms "
          f"(one alone: {alone * ms:.0f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    asyncio.run(main(parser.parse_args().runs))
