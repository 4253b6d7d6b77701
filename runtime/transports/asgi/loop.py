"""The background event loop the library client's app and everything it owns run on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar, TypeVarTuple, Unpack

__all__ = ["BackgroundLoop"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class BackgroundLoop:
    """An asyncio event loop running in a daemon thread.

    Single use: `start()` is idempotent, `stop()` cancels whatever is still
    running on the loop, closes it and joins the thread; a stopped loop cannot
    be restarted.
    """

    def __init__(self, name: str = "stack-asgi-loop") -> None:
        self._name = name
        # Guards the accepting flag together with scheduling, so nothing can be
        # queued behind the loop's stop callback and silently never run.
        self._lock = threading.Lock()
        self._accepting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("BackgroundLoop has not been started")
        return self._loop

    def start(self) -> None:
        with self._lock:
            if self._loop is not None:
                if not self._accepting:
                    raise RuntimeError("a stopped BackgroundLoop cannot be restarted")
                return
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_serve_forever, args=(loop,), name=self._name, daemon=True)
            self._loop, self._thread, self._accepting = loop, thread, True
            thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, loop = self._thread, self._loop
            if self._accepting and loop is not None:
                self._accepting = False
                loop.call_soon_threadsafe(loop.stop)
        # A stop requested from the loop's own thread cannot wait for itself.
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def in_loop_thread(self) -> bool:
        """Whether the caller is running on this loop's thread."""
        return self._thread is threading.current_thread()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if not self._accepting or self._loop is None:
                coro.close()
                raise RuntimeError("BackgroundLoop is not running")
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and block until it finishes; cancel it on timeout."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("BackgroundLoop.run() called from the loop's own thread would deadlock")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def call_soon_threadsafe(self, callback: Callable[[Unpack[Ts]], object], *args: Unpack[Ts]) -> bool:
        """Schedule `callback(*args)` on the loop; False if the loop is not running."""
        with self._lock:
            if not self._accepting or self._loop is None:
                return False
            self._loop.call_soon_threadsafe(callback, *args)
            return True

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        _cancel_remaining_tasks(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    # Cancelled tasks may spawn cleanup tasks of their own, hence the loop.
    while tasks := asyncio.all_tasks(loop):
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
