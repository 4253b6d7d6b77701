"""`stack run --workers N` (or run.yaml's `server.workers`): N server processes on one port.

Each worker is a whole `stack run` of the same config: its own providers, started in order, its
own event loop, and the same graceful shutdown as a single process. They share the port through
SO_REUSEPORT (the kernel spreads new connections over them) and the state through the configured
storage: SQLite in WAL mode takes several processes (writers wait for one another's lock, up to
its busy timeout), PostgreSQL any number. The supervisor here only starts them, passes SIGTERM and
SIGINT on (each drains as one process would), and starts again a worker that dies while the others
serve; it loads no provider and serves nothing itself. On Linux, a supervisor killed outright
(SIGKILL) takes its workers down with it: each gets SIGTERM from the kernel and drains. It also
makes the directory where the workers keep their metrics for one another, so that a scrape of any
worker sees the whole server (runtime.observability.worker_metrics), and removes it at the end.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

__all__ = ["METRICS_ENV", "WORKER_ENV", "supervise", "worker_metrics"]

log = logging.getLogger("stack")

WORKER_ENV = "STACK_WORKER"
"""Set (to the worker's number) in each worker's environment: it binds with SO_REUSEPORT."""

METRICS_ENV = "STACK_WORKER_METRICS"
"""Set in each worker's environment: the directory the workers share their metrics in."""

_RESTART_DELAY_S = 1.0
_STOPPED = frozenset({0, 130, 143, -signal.SIGINT, -signal.SIGTERM})
"""Exit statuses of a worker the signal stopped (one still starting when it came has no graceful
shutdown to run yet: Python's own SIGINT or SIGTERM ends it)."""
_EARLY_EXIT_S = 10.0
"""A worker that exits with an error status this soon after it started failed to start (a config
or port problem): the others are stopped rather than started again and again. One killed by a
signal is started again whenever it dies."""


def supervise(config: str, workers: int, host: str | None, port: int, grace_s: float) -> int:
    """Run `workers` workers of `config` on `port` until SIGTERM or SIGINT; the exit status is 0 if
    every worker stopped cleanly."""
    argv = [sys.executable, "-m", "runtime.cli", "run", config, "--port", str(port), "--workers", "1"]
    if host is not None:
        argv += ["--host", host]
    stopping = False

    stop_with_me = _stop_with(os.getpid())
    # Made whether or not metrics are on (the workers read the config, not the supervisor): an empty
    # directory, private to this user, for the server's life.
    metrics = tempfile.mkdtemp(prefix="stack-metrics-")

    def start(number: int) -> tuple[subprocess.Popen[bytes], float]:
        env = {**os.environ, WORKER_ENV: str(number), METRICS_ENV: metrics}
        return subprocess.Popen(argv, env=env, preexec_fn=stop_with_me), time.monotonic()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for process, _ in running.values():
            if process.poll() is None:
                # SIGTERM whatever came: a worker still starting has no graceful shutdown to run
                # yet, and SIGINT would surface inside a provider's start as an error.
                process.send_signal(signal.SIGTERM)

    running = {number: start(number) for number in range(workers)}
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info("supervising %d workers of %s on port %d (pids %s)", workers, config, port,
             ", ".join(str(process.pid) for process, _ in running.values()))
    failed = False
    try:
        while running:
            time.sleep(0.1)
            for number, (process, started) in list(running.items()):
                code = process.poll()
                if code is None:
                    continue
                del running[number]
                if stopping:
                    failed |= code not in _STOPPED
                elif code > 0 and time.monotonic() - started < _EARLY_EXIT_S:
                    log.error("worker %d exited at start (status %s): stopping the others", number, code)
                    failed = True
                    stop(signal.SIGTERM, None)
                else:
                    log.error("worker %d (pid %d) exited with status %s: starting it again", number, process.pid, code)
                    time.sleep(_RESTART_DELAY_S)
                    running[number] = start(number)
                    if stopping:
                        # The signal came while it was being started, before `stop` could see it:
                        # nobody would ever stop it, and the supervisor would wait for it forever.
                        running[number][0].send_signal(signal.SIGTERM)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _reap([process for process, _ in running.values()], grace_s)
        shutil.rmtree(metrics, ignore_errors=True)
    return 1 if failed else 0


def worker_metrics() -> tuple[Path, int] | None:
    """In a worker of `supervise`: the directory the workers share their metrics in, and this
    worker's number (the same as the worker it replaces, if one died)."""
    directory, number = os.environ.get(METRICS_ENV), os.environ.get(WORKER_ENV, "")
    return (Path(directory), int(number)) if directory and number.isdigit() else None


def _stop_with(supervisor: int) -> Callable[[], None] | None:
    """What a worker runs before it starts, on Linux: the kernel sends it SIGTERM (its graceful
    shutdown) when the supervisor dies, killed by a signal it cannot pass on (SIGKILL, the OOM
    killer), so no worker is left holding the port with nobody to stop it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child should not load libraries

    def stop_with_supervisor() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != supervisor:  # it died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return stop_with_supervisor


_PR_SET_PDEATHSIG = 1


def _reap(processes: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    """Whatever still runs after an unexpected exit of the supervisor's loop: stopped, then killed."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace_s + 5
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
