"""For tests that run a stack against the live fake upstream (timing matters, so nothing is
replayed): its environment, and waiting for a condition. The fixtures (`upstream`, `live`,
`client`) are in tests/integration/conftest.py."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

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

