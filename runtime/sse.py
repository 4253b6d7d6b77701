"""Server-sent events: reading an upstream's stream, framing our own."""

from __future__ import annotations

from collections.abc import AsyncIterator

__all__ = ["DONE", "iter_sse_data", "sse_frame"]

DONE = b"[DONE]"


def sse_frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE event; `data` must not contain newlines (compact JSON never does)."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


async def iter_sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data` payload of each event of an SSE byte stream, up to (not including) `[DONE]`."""
    buffer = b""
    data: list[bytes] = []
    async for chunk in chunks:
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end].rstrip(b"\r"), buffer[end + 1:]
            if line:
                if line.startswith(b"data:"):
                    data.append(line[6:] if line[5:6] == b" " else line[5:])
                continue
            if data:
                payload = b"\n".join(data)
                data = []
                if payload == DONE:
                    # Read the stream to its end, so its connection can go back to the pool.
                    async for _ in chunks:
                        pass
                    return
                yield payload
    if data:
        payload = b"\n".join(data)
        if payload != DONE:
            yield payload
