"""For tests that run a stack against the live fake upstream (timing matters, so nothing is
replayed): its environment, and waiting for a condition. The fixtures (`upstream`, `live`,
`client`) are in tests/integration/conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx2
import pytest

from fake_upstream.server import FakeUpstream

CONFIG = "tests/integration/run.yaml"


def live_env(upstream: FakeUpstream, state_dir: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, STACK_TEST_INFERENCE_URL=upstream.base_url, STACK_RECORDING_MODE="live", STACK_STATE_DIR=str(state_dir), **extra)


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.05)



def start_server(env: Mapping[str, str], port: int, config: str = CONFIG) -> subprocess.Popen[bytes]:
    """`stack run` of `config` in a process of its own (to kill and restart), output discarded."""
    return subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", config, "--port", str(port)], env=dict(env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def healthy(base: str) -> bool:
    """Whether the server at `base` (…/v1) answers its health check."""
    try:
        return httpx2.get(f"{base}/health", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False
