"""Server-sent events: reading an upstream's stream, framing and sending our own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from runtime.http.departure import on_departure

__all__ = ["DONE", "EventStreamResponse", "close_frames", "iter_sse_data", "sse_frame"]

DONE = b"[DONE]"

# Frames a slow client has not taken yet, beyond which the producer waits for it.
HIGH_WATER_BYTES = 256 * 1024


def sse_frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE event; `data` must not contain newlines (compact JSON never does)."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


async def iter_sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data` payload of each event of an SSE byte stream, up to (not including) `[DONE]`."""
    # Lines are found by position in each chunk; only an incomplete last line is carried over.
    # (Slicing the rest of the buffer off after each line copied a burst's bytes once per event.)
    rest = b""
    data: list[bytes] = []
    async for chunk in chunks:
        buffer = rest + chunk if rest else chunk
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = buffer[start:end]
            start = end + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            if line:
                if line.startswith(b"data:"):
                    data.append(line[6:] if line[5:6] == b" " else line[5:])
                continue
            if data:
                payload = data[0] if len(data) == 1 else b"\n".join(data)
                data = []
                if payload == DONE:
                    # Read the stream to its end, so its connection can go back to the pool.
                    async for _ in chunks:
                        pass
                    return
                yield payload
        rest = buffer[start:]
    if data:
        payload = b"\n".join(data)
        if payload != DONE:
            yield payload


class EventStreamResponse(Response):
    """A `text/event-stream` response whose frames come from an async iterator.

    Frames that are ready together go out in one write. The iterator runs in a task of its own
    and the response sends whatever has collected each time that task pauses, so a burst of
    upstream chunks read at once (the usual case under load) costs one pass down the ASGI
    send chain and one system call, not one per event; a lone frame still goes out as soon
    as its producer waits for more.

    The start of a stream is the exception: its first `flush_after` frames (the head; a chat
    stream passes 2, the role chunk and the first token's) are made by the response itself and
    sent with the status line, before the iterator's task exists. So the first token does not wait
    for the rest of a burst read with it, nor for the event loop to read and parse more of the
    upstream's answer before that task first runs (which it did when the task made the head too:
    the first token of a 64-token burst went out 0.09 ms later, the stream's end 0.23 ms later).
    An error raised while the head is made comes before the status line: the client gets an
    error response, not a broken stream.

    A client that goes away cancels whichever task is making frames, as Starlette's
    StreamingResponse does: the code producing them sees `CancelledError` at the point it was
    waiting. Code that tells its task apart (runtime.http.middleware.Draining) must look it up where
    it waits: the head and the rest are made by different tasks."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterable[bytes], headers: Mapping[str, str] | None = None, flush_after: int = 0) -> None:
        self.frames = frames
        self.flush_after = flush_after
        self.status_code = 200
        self.background = None
        self.init_headers({"cache-control": "no-cache", **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outbox = _Outbox()
        loop = asyncio.get_running_loop()
        frames = aiter(self.frames)
        target = _Target(asyncio.current_task())
        forget = on_departure(scope, receive, lambda: _departed(target, outbox))
        producer: asyncio.Task[None] | None = None
        try:
            head: list[bytes] = []
            ended = False
            try:
                while len(head) < self.flush_after:
                    head.append(await anext(frames))
            except StopAsyncIteration:
                ended = True
            except asyncio.CancelledError:
                if not outbox.gone or target.task is None:
                    raise
                target.task.uncancel()  # the departure's: the client has gone
                await close_frames(frames)
                return
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            if head:
                await send({"type": "http.response.body", "body": b"".join(head), "more_body": not ended})
            if ended:
                if not head:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            producer = target.task = loop.create_task(outbox.fill(frames))
            while True:
                await outbox.ready.wait()
                if outbox.gone:
                    return
                data = outbox.take()
                if outbox.finished:  # the producer is done: these are the last frames
                    break
                if data:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            try:
                producer.result()  # the producer's own error
            except BaseException:
                if data:  # what it made before that still goes out
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                raise
            # The end goes out with the last frames: one write, one pass down the send chain, not two.
            await send({"type": "http.response.body", "body": data, "more_body": False})
        finally:
            forget()
            if producer is not None:
                if not producer.done():
                    producer.cancel()
                elif not producer.cancelled():
                    producer.exception()  # retrieved: it was raised above or the client has gone


class _Outbox:
    """Frames produced but not sent yet, and the signals between producer and sender."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.size = 0
        self.ready = asyncio.Event()  # frames are waiting, or the stream ended
        self.room = asyncio.Event()  # the sender has taken what was waiting
        self.room.set()
        self.finished = False
        self.gone = False

    async def fill(self, frames: AsyncIterable[bytes]) -> None:
        try:
            async for frame in frames:
                self.frames.append(frame)
                self.size += len(frame)
                self.ready.set()
                if self.size > HIGH_WATER_BYTES:
                    self.room.clear()
                    await self.room.wait()
        finally:
            self.finished = True
            self.ready.set()

    def take(self) -> bytes:
        data = b"".join(self.frames)
        self.frames.clear()
        self.size = 0
        self.ready.clear()
        self.room.set()
        return data


class _Target:
    """The task making the stream's frames: the response's own while it makes the head, then the producer's."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task


async def close_frames(frames: AsyncIterator[Any]) -> None:
    """Close an iterator of frames (an async generator's `aclose`) if it can be closed."""
    close = getattr(frames, "aclose", None)
    if close is not None:
        await close()


def _departed(target: _Target, outbox: _Outbox) -> None:
    outbox.gone = True
    if target.task is not None:
        target.task.cancel()
    outbox.ready.set()
