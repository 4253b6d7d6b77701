"""What the SQLite and PostgreSQL paths share: a write run to its end whatever befalls its caller."""

from __future__ import annotations

import asyncio
from typing import TypeVar

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
