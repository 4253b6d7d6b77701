"""Recording: forwarding requests upstream and writing each exchange as it streams past."""

from __future__ import annotations

import base64
import codecs
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx2

from runtime.recording._common import Chunk
from runtime.recording.keys import NOT_JSON, key_of, parse_json
from runtime.recording.replay import replayed_response
from runtime.recording.store import RecordingStore

CLOSED_BY_CLIENT: Final = "closed by client"

# Response headers worth replaying: what clients act on. Dates, request ids and rate-limit
# counters would only make recordings churn.
_KEPT_HEADERS: Final = ("content-type", "retry-after", "retry-after-ms")


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Forwards requests to `inner` and records each exchange under `directory`.

    The response body reaches the caller chunk by chunk as it arrives (nothing is buffered
    first); the file is written when the body ends, fails or is closed (see the package docstring
    for what each case records). With `overwrite=False` (record-if-missing), a request that is
    already recorded is replayed instead of forwarded.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, directory: Path, *, overwrite: bool = True) -> None:
        self._inner = inner
        self._store = RecordingStore(directory)
        self._overwrite = overwrite

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        key, canonical = key_of(request)
        if not self._overwrite and (record := self._store.find(key, canonical)) is not None:
            return replayed_response(record["response"], request)
        upstream = await self._inner.handle_async_request(request)
        capture = _Capture(self._store, key, canonical, upstream)
        return httpx2.Response(
            upstream.status_code,
            headers=_passed_headers(upstream.headers),
            stream=_TeeStream(upstream, capture),
            request=request,
            extensions=upstream.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _passed_headers(headers: httpx2.Headers) -> list[tuple[bytes, bytes]]:
    # The caller gets the decoded body (that is what is recorded), so the encoding headers go.
    if "content-encoding" not in headers:
        return list(headers.raw)
    return [(k, v) for k, v in headers.raw if k.lower() not in (b"content-encoding", b"content-length")]


class _TeeStream(httpx2.AsyncByteStream):
    """Hands the upstream's (decoded) chunks to the caller as they come and to a `_Capture`.

    Resumable over one upstream iterator, like a network stream: the openai SDK iterates
    `response.stream` a second time to drain it after `[DONE]`.
    """

    def __init__(self, upstream: httpx2.Response, capture: _Capture) -> None:
        self._upstream = upstream
        self._chunks = upstream.aiter_bytes()
        self._capture = capture

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._chunks:
                self._capture.feed(chunk)
                yield chunk
        except Exception as exc:
            self._capture.finish(f"{type(exc).__name__}: {exc}")
            raise
        self._capture.finish(None)

    async def aclose(self) -> None:
        self._capture.finish(CLOSED_BY_CLIENT)
        try:
            await self._chunks.aclose()
        finally:
            await self._upstream.aclose()


class _Capture:
    """Collects one response as it streams past and writes its recording once, at the end."""

    def __init__(self, store: RecordingStore, key: str, canonical: dict[str, Any], upstream: httpx2.Response) -> None:
        self._store = store
        self._key = key
        self._canonical = canonical
        self._status = upstream.status_code
        self._headers = {name: upstream.headers[name] for name in _KEPT_HEADERS if name in upstream.headers}
        content_type = upstream.headers.get("content-type", "").lower()
        self._sse = _SSEParser() if content_type.startswith("text/event-stream") else None
        self._json = "json" in content_type
        self._body = bytearray()
        self._done = False

    def feed(self, chunk: bytes) -> None:
        if self._sse is not None:
            self._sse.feed(chunk)
        else:
            self._body += chunk

    def finish(self, error: str | None) -> None:
        """Write the recording; `error` is why the body ended early, None if it ended normally."""
        if self._done:
            return
        self._done = True
        response: dict[str, Any] = {"status": self._status, "headers": self._headers}
        if self._sse is not None:
            response["chunks"] = self._sse.close(ended=error is None)
            if error == CLOSED_BY_CLIENT and "[DONE]" in response["chunks"]:
                error = None  # SDKs stop reading at [DONE]: the exchange was complete
            if error is not None:
                response["stream_error"] = error
        elif error is not None:
            return  # half a non-stream body cannot be replayed faithfully
        else:
            response.update(self._body_fields())
        self._store.write(self._key, {"request": self._canonical, "response": response})

    def _body_fields(self) -> dict[str, Any]:
        body = bytes(self._body)
        if self._json:
            parsed = parse_json(body)
            if parsed is not NOT_JSON:
                return {"body": parsed}
        try:
            return {"text": body.decode("utf-8")}
        except UnicodeDecodeError:
            return {"body_base64": base64.b64encode(body).decode("ascii")}


class _SSEParser:
    """Incremental server-sent-events parser: bytes in, one chunk per complete event out."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._chunks: list[Chunk] = []

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        # A trailing "\r" may be the first half of a "\r\n" split across chunks: wait for more.
        held = "\r" if text.endswith("\r") else ""
        text = text[: len(text) - len(held)].replace("\r\n", "\n").replace("\r", "\n")
        *blocks, rest = text.split("\n\n")
        for block in blocks:
            self._add(block)
        self._pending = rest + held

    def close(self, ended: bool) -> list[Chunk]:
        """The chunks so far; if the stream `ended` normally, with an unterminated final event."""
        rest = (self._pending + self._decoder.decode(b"", final=True)).replace("\r\n", "\n").replace("\r", "\n")
        self._pending = ""
        # A cut stream's unfinished event never reached the caller as an event: leave it out.
        if ended and rest.strip():
            self._add(rest)
        return list(self._chunks)

    def _add(self, block: str) -> None:
        event, data = "", []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue  # blank or comment (keep-alive)
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field == "event":
                event = value
        if not data and not event:
            return
        text = "\n".join(data)
        self._chunks.append({"event": event, "data": text} if event and event != "message" else text)
