"""The server process's own set-up (runtime/server/serve.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runtime.server import serve as server


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector")
def test_startup_objects_are_frozen_and_the_young_generation_collected_less_often() -> None:
    gc.disable()  # as `stack run` starts (runtime.cli): the server turns the collector on once started
    server._freeze_startup_objects()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    # A proxied request allocates more containers than the default 700: it paid a collection each.
    assert gc.get_threshold()[0] >= 7_000
