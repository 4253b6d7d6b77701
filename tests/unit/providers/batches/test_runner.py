"""A batch gives way to interactive requests: while any is in flight, the process's batches keep
at most `beside_live` requests under way; with none, they go at their own pace."""

from __future__ import annotations

import asyncio
from typing import Any

from providers.batches.config import BuiltinBatchesConfig
from providers.batches.runner import Runner


class Load:
    """A loopback whose interactive load the test sets."""

    def __init__(self) -> None:
        self.interactive = 0

    def live(self) -> int:
        return self.interactive

    async def __call__(self, *args: Any) -> Any:
        raise AssertionError("not sent in this test")


def runner(load: Load) -> Runner:
    return Runner(store=None, files=None, loopback=load, limits=BuiltinBatchesConfig(beside_live=1, beside_live_interval_s=0))  # type: ignore[arg-type]


async def test_with_no_interactive_request_a_batch_does_not_wait() -> None:
    batches = runner(Load())
    batches.in_flight = 12
    await asyncio.wait_for(batches._give_way(), 1)


async def test_beside_interactive_requests_a_batch_waits_for_its_one_request_to_end() -> None:
    load = Load()
    load.interactive = 3
    batches = runner(load)
    batches.in_flight = 1
    waiting = asyncio.create_task(batches._give_way())
    await asyncio.sleep(0.02)
    assert not waiting.done()  # one batch request under way already, and live ones in flight
    batches.in_flight = 0
    batches._freed.set()
    await asyncio.wait_for(waiting, 1)


async def test_when_the_interactive_requests_end_the_batch_goes_on() -> None:
    load = Load()
    load.interactive = 1
    batches = runner(load)
    batches.in_flight = 5
    waiting = asyncio.create_task(batches._give_way())
    await asyncio.sleep(0.02)
    assert not waiting.done()
    load.interactive = 0
    await asyncio.wait_for(waiting, 1)
