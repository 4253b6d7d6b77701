"""The supervisor of `stack run --workers N` (runtime/server/workers.py), with stand-in workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runtime.server import workers


def test_a_stop_that_comes_while_a_worker_is_started_again_stops_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in worker: waits until a signal ends it, whatever its arguments.
    stand_in = tmp_path / "worker"
    stand_in.write_text("#!/bin/sh\nexec sleep 60\n")
    stand_in.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stand_in))
    monkeypatch.setattr(workers, "_RESTART_DELAY_S", 0.0)
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process = real_popen(*args, **kwargs)
        started.append(process)
        if len(started) == 2:
            threading.Timer(0.3, lambda: started[0].kill()).start()  # the first worker dies
        if len(started) == 3:  # its replacement: the stop comes before the supervisor has it in hand
            os.kill(os.getpid(), signal.SIGINT)
        return process

    monkeypatch.setattr(workers.subprocess, "Popen", popen)
    # Were it to hang, the stand-ins are killed after a while, so that the test fails instead.
    watchdog = threading.Timer(15, lambda: [process.kill() for process in started])
    watchdog.start()
    began = time.monotonic()
    try:
        status = workers.supervise("run.yaml", 2, None, 8321, grace_s=1.0)
    finally:
        watchdog.cancel()
    assert time.monotonic() - began < 15, "the supervisor waited for a worker nobody stopped"
    assert len(started) == 3
    assert status == 0
    assert all(process.poll() == -signal.SIGTERM for process in started[1:])
