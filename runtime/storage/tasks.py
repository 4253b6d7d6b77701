"""What the SQLite and PostgreSQL paths share: a write run to its end whatever befalls its caller."""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


async def to_the_end(future: asyncio.Future[T]) -> T:
    """A write's outcome from the writer thread. Cancelled meanwhile, it still waits for the thread
    to be done before it raises, and so before the write lock is let go: until then the writing
    connection is the thread's, and the next write, on the event loop perhaps, must not use it."""
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        raise cancelled
    return future.result()
