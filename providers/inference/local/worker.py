"""Running an in-process model off the event loop: one thread of its own, a bounded queue, and
generation that stops within a token when nobody wants the rest.

The model's library does its work in C and releases the GIL, so a thread serves as well as a
process here, without copying prompts and outputs between processes. One thread per model: the
models are not safe to use from two threads at once, and on a small CPU machine one generation at
a time is also the fastest order. Requests past `max_queue` waiting ones are refused at once with a
503 (retry-after: 1), so a burst cannot pile up minutes of work nor hold the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from contract.errors import ServiceUnavailableError

__all__ = ["ModelWorker"]

log = logging.getLogger("stack")

T = TypeVar("T")
_END = object()


class ModelWorker:
    """One model's thread: `load` runs once (at `preload`, or on first use); `call` and `stream`
    queue behind it."""

    def __init__(self, name: str, load: Callable[[], Any], max_queue: int) -> None:
        self.name = name
        self._load = load
        self._model: Any = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"stack-model-{name}")
        self._admitted = 0  # running and waiting
        self._max = 1 + max_queue

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _admit(self) -> None:
        if self._admitted >= self._max:
            raise ServiceUnavailableError(
                f"The local model '{self.name}' is busy: {self._max - 1} requests are already waiting for it. Try again shortly.",
                code="model_overloaded", headers={"retry-after": "1"},
            )
        self._admitted += 1

    def _model_now(self) -> Any:
        if self._model is None:
            self._model = self._load()
        return self._model

    def preload(self) -> None:
        """Load the model now, on its thread: a request that comes meanwhile queues behind the load.
        A load that fails is logged, and tried again (and answered) by the first request."""
        def load() -> None:
            started = time.monotonic()
            try:
                self._model_now()
            except Exception as error:  # noqa: BLE001 - the first request tries again, and says why
                log.warning("the local model '%s' could not be loaded at start-up: %s", self.name, error)
                return
            log.info("local model '%s' loaded in %.1f s", self.name, time.monotonic() - started)

        self._thread.submit(load)

    async def call(self, work: Callable[[Any], T]) -> T:
        """`work(model)` on the model's thread."""
        self._admit()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, lambda: work(self._model_now()))
        finally:
            self._admitted -= 1

    async def stream(self, work: Callable[[Any], Iterator[T]]) -> AsyncGenerator[T, None]:
        """The items of `work(model)`, produced on the model's thread and handed over as they
        come; when the consumer stops (a client gone, a cancel), the thread stops after the item
        it is producing and closes the iterator, which ends the generation."""
        self._admit()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            items = None
            try:
                items = work(self._model_now())
                for item in items:
                    if stop.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, item)
            except BaseException as error:  # noqa: BLE001 - handed to the consumer
                loop.call_soon_threadsafe(queue.put_nowait, _Failure(error))
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        done = loop.run_in_executor(self._thread, produce)
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()
            self._admitted -= 1
            if not done.done():
                # The generation ends within an item; nobody waits for it (the consumer is gone).
                done.add_done_callback(lambda _: None)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error
