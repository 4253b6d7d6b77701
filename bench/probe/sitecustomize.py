"""Loaded by the stack process `bench/tail.py` starts (its PYTHONPATH holds this folder only then):
records each garbage collection (its generation, start and duration on the monotonic clock the
client's timings share) and writes them to $BENCH_PROBE_FILE when the process exits. Not part of
the project: the server runs unchanged but for this callback."""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import time

_file = os.environ.get("BENCH_PROBE_FILE")
if _file:
    _events: list[tuple[float, float, int, int]] = []
    _started = [0.0]

    def _on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
        else:
            now = time.perf_counter()
            _events.append((_started[0], now - _started[0], info["generation"], info.get("collected", 0)))

    gc.callbacks.append(_on_gc)

    def _write() -> None:
        with open(_file, "w") as sink:
            json.dump({"gc": _events}, sink)

    atexit.register(_write)
    signal.signal(signal.SIGUSR2, lambda *_: _write())  # the bench asks for the events before it stops the server
