"""The model's own thread: queued work, a bound on waiting requests, and streams that stop when
their consumer does."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from providers.inference.local.worker import ModelWorker
from contract.errors import ServiceUnavailableError


def test_the_model_loads_once_on_first_use() -> None:
    loads: list[int] = []

    async def scenario() -> list[int]:
        worker = ModelWorker("m", lambda: loads.append(1) or "model", max_queue=2)
        assert not worker.loaded
        answers = [await worker.call(lambda model: f"{model} {i}") for i in range(3)]
        assert worker.loaded
        worker.close()
        return [len(answer) for answer in answers]

    assert asyncio.run(scenario()) == [7, 7, 7] and loads == [1]


def test_past_the_queue_a_request_is_refused_at_once_with_a_503() -> None:
    release = threading.Event()

    async def scenario() -> None:
        worker = ModelWorker("m", lambda: "model", max_queue=1)
        first = asyncio.ensure_future(worker.call(lambda model: release.wait(5)))
        second = asyncio.ensure_future(worker.call(lambda model: "queued"))
        await asyncio.sleep(0.05)
        with pytest.raises(ServiceUnavailableError) as refused:
            await worker.call(lambda model: "third")
        assert refused.value.headers == {"retry-after": "1"} and refused.value.code == "model_overloaded"
        release.set()
        assert await second == "queued" and await first is True
        assert await worker.call(lambda model: "after") == "after"  # the slots came back
        worker.close()

    asyncio.run(scenario())


def test_a_stream_stops_producing_when_its_consumer_leaves() -> None:
    produced: list[int] = []
    closed = threading.Event()

    def tokens(model: str) -> Iterator[int]:
        try:
            for index in range(1000):
                produced.append(index)
                time.sleep(0.002)
                yield index
        finally:
            closed.set()

    async def scenario() -> None:
        worker = ModelWorker("m", lambda: "model", max_queue=0)
        stream = worker.stream(tokens)
        got: list[int] = []
        async for item in stream:
            got.append(item)
            if len(got) == 3:
                break
        await stream.aclose()
        assert got == [0, 1, 2]
        assert await asyncio.to_thread(closed.wait, 2)
        # Stopped soon after the consumer left: 1,000 items would take 2 s. (Within an item or two on
        # an idle machine; a loaded one was seen to take 9 more, so the bound leaves room.)
        assert len(produced) < 100
        assert await worker.call(lambda model: "free") == "free"
        worker.close()

    asyncio.run(scenario())


def test_a_failure_on_the_models_thread_reaches_the_consumer() -> None:
    def broken(model: str) -> Iterator[int]:
        yield 1
        raise ValueError("bad grammar")

    async def scenario() -> None:
        worker = ModelWorker("m", lambda: "model", max_queue=0)
        seen: list[int] = []
        with pytest.raises(ValueError, match="bad grammar"):
            async for item in worker.stream(broken):
                seen.append(item)
        assert seen == [1]
        worker.close()

    asyncio.run(scenario())


def test_a_preloaded_model_loads_on_its_thread_and_a_request_waits_behind_the_load() -> None:
    loading = threading.Event()
    finish = threading.Event()
    loads: list[str] = []

    def load() -> str:
        loads.append(threading.current_thread().name)
        loading.set()
        finish.wait(5)
        return "model"

    async def scenario() -> str:
        worker = ModelWorker("m", load, max_queue=2)
        worker.preload()
        assert loading.wait(5)  # started at once, not at the first request
        answer = asyncio.ensure_future(worker.call(lambda model: f"{model} answers"))
        await asyncio.sleep(0.05)
        assert not answer.done()  # behind the load
        finish.set()
        result = await answer
        worker.close()
        return result

    assert asyncio.run(scenario()) == "model answers"
    assert len(loads) == 1 and loads[0].startswith("stack-model-m")


def test_a_preload_that_fails_is_logged_and_the_first_request_tries_again_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[int] = []

    def load() -> str:
        attempts.append(1)
        raise RuntimeError("no such file")

    async def scenario() -> None:
        worker = ModelWorker("m", load, max_queue=2)
        worker.preload()
        with pytest.raises(RuntimeError, match="no such file"):
            await worker.call(lambda model: model)
        worker.close()

    asyncio.run(scenario())
    assert len(attempts) == 2
    assert any("could not be loaded at start-up: no such file" in record.getMessage() for record in caplog.records)
