"""What the SQLite and PostgreSQL paths share (a write run to its end whatever befalls its caller), and
the providers' periodic work over their stores (`every`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from runtime.storage.outage import StorageUnavailableError

log = logging.getLogger("stack")

T = TypeVar("T")


async def to_the_end(future: asyncio.Future[T]) -> T:
    """The outcome of `future`, a write under way. Cancelled meanwhile, it still waits for the write
    to be done before it raises: on SQLite the writing connection is the writer thread's until then
    (and the write lock with it), and the next write, on the event loop perhaps, must not use it; on
    PostgreSQL the connection goes back to the pool or stays kept only once its work is over."""
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        if not future.cancelled():
            future.exception()  # its failure is the cancelled caller's to drop: not logged as never retrieved
        raise cancelled
    return future.result()


def every(seconds: float, work: Callable[[], Awaitable[object]], what: str, *, at_once: bool = False) -> asyncio.Task[None]:
    """A task that runs `work` every `seconds` (first at once, with `at_once`) until cancelled: a
    provider's sweep. A database that cannot serve has been reported by the storage layer, and the
    next round tries again; any other failure is logged, naming `what`, and the rounds go on."""

    async def rounds() -> None:
        if not at_once:
            await asyncio.sleep(seconds)
        while True:
            try:
                await work()
            except StorageUnavailableError:
                pass
            except Exception:
                log.exception("%s failed; it runs again in %.0f s", what, seconds)
            await asyncio.sleep(seconds)

    return asyncio.get_running_loop().create_task(rounds())
