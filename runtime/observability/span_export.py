"""Traces exported over OTLP by a process of their own (run.yaml `server.tracing`, exporter `otlp`).

The SDK's BatchSpanProcessor encodes spans to protobuf and posts them from a thread of the
server's process. That thread's Python (27 µs a span to encode, then the HTTP post) ran under the
interpreter lock the event loop needs: at 10 % sampling the chat path lost a third of its
throughput on one core, most of it to the thread and the loop taking the lock from each other
(bench/README). Here a span's end only appends its fields (a tuple of plain values) to a list; every
half second, or at 512 spans, the list is pickled and written to the stdin pipe of a child process
(`python -m runtime.observability.span_export`) through the event loop's non-blocking pipe transport,
and the child rebuilds the spans and hands them to the SDK's own OTLP/HTTP exporter (its endpoint,
the OTEL_EXPORTER_OTLP_* variables, retries). What stays in the server is about 3 µs a span; the
encoding, the posts and their waiting are the child's, on another core where there is one.

No SDK piece does this (a collector beside the server still needs the spans encoded and sent by
the server), hence this module. Nothing waits on the child: batches it has not read yet stay in the
pipe's buffer, up to MAX_BUFFERED bytes, past which new batches are dropped and counted in a
warning; a child that exited is started again with the next batch. The server's shutdown writes
what is left and waits (at most CLOSE_WAIT_S) for the child to send it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import sys
import time
from typing import Any

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["PipeSpanProcessor", "rebuilt"]

log = logging.getLogger("stack")

EVERY_S = 0.5
BATCH = 512
MAX_BUFFERED = 8 * 1024 * 1024
CLOSE_WAIT_S = 5.0

Flat = tuple[Any, ...]


def rebuilt(values: Flat, resource: Any) -> ReadableSpan:
    """The SDK's span for the plain values a span of ours ended as (runtime.observability.spans),
    for the SDK's exporters."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

    (name, trace_id, span_id, flags, state, parent_id, parent_remote, kind, start, end, attributes, code, description,
     events, links, scope) = values
    parent = SpanContext(trace_id, parent_id, is_remote=parent_remote, trace_flags=TraceFlags(flags)) if parent_id else None
    status_code = StatusCode(code)
    return ReadableSpan(
        name, context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(flags), trace_state=TraceState(state)),
        parent=parent, resource=resource, attributes=attributes,
        events=[Event(event_name, event_attributes, timestamp) for event_name, event_attributes, timestamp in events],
        links=[Link(SpanContext(link_trace, link_span, is_remote=True, trace_flags=TraceFlags(link_flags)), link_attributes)
               for link_trace, link_span, link_flags, link_attributes in links],
        kind=SpanKind(kind), status=Status(status_code, description if status_code is StatusCode.ERROR else None),
        start_time=start, end_time=end, instrumentation_scope=InstrumentationScope(scope))


class PipeSpanProcessor:
    """Hands finished spans to the exporting child (see the module's docstring)."""

    def __init__(self, endpoint: str | None, resource_attributes: dict[str, Any]) -> None:
        self._settings = json.dumps({"endpoint": endpoint, "resource": resource_attributes})
        self._pending: list[Flat] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._starting: asyncio.Task[asyncio.subprocess.Process] | None = None
        self._dropped = 0
        self._warned_at = 0.0
        self._send_asked = False

    def add(self, values: Flat) -> None:
        """A span that ended (as runtime.observability.spans.Span.end gives it)."""
        self._pending.append(values)
        if self._ticker is None:
            self._begin()
        elif len(self._pending) >= BATCH and not self._send_asked and self._loop is not None:
            self._send_asked = True  # once a batch: a span may end on another thread, hence threadsafe
            self._loop.call_soon_threadsafe(self._send_soon)

    def _begin(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # a span ended outside the loop's thread before any inside it: sent with the next
            return
        self._ticker = self._loop.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(EVERY_S)
            await self._send()

    def _send_soon(self) -> None:
        if self._loop is not None:
            self._loop.create_task(self._send())

    async def _send(self) -> None:
        self._send_asked = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            await self._write(batch)
        except Exception as error:  # the batch is lost; the ticking goes on (else spans would pile up unsent)
            self._drop(len(batch), f"{type(error).__name__}: {error}")

    async def _write(self, batch: list[Flat]) -> None:
        child = await self._running_child()
        assert child.stdin is not None
        if child.stdin.transport.get_write_buffer_size() > MAX_BUFFERED:
            self._drop(len(batch), "the exporting process is behind")
            return
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        child.stdin.write(len(data).to_bytes(4, "big") + data)

    async def _running_child(self) -> asyncio.subprocess.Process:
        if self._child is not None and self._child.returncode is None:
            return self._child
        if self._starting is None:
            self._starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
                sys.executable, "-m", "runtime.observability.span_export", self._settings,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                start_new_session=True))  # a Ctrl-C to the server's group does not cut the child short: it ends at its stdin's end
        try:
            self._child = await self._starting
        finally:
            self._starting = None
        return self._child

    def _drop(self, count: int, why: str) -> None:
        self._dropped += count
        now = time.monotonic()
        if now - self._warned_at >= 60:
            self._warned_at = now
            log.warning("tracing: %d spans dropped so far: %s", self._dropped, why)

    async def aclose(self) -> None:
        """Send what is left, and wait (at most CLOSE_WAIT_S) for the child to export it."""
        if self._ticker is not None:
            self._ticker.cancel()
        await self._send()
        child = self._child
        if child is None or child.stdin is None:
            return
        child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("tracing: the exporting process did not finish within %.0f s; its last spans may be lost", CLOSE_WAIT_S)
            child.kill()


def _read(stream: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = stream.read(size - len(data))
        if not part:
            return b""
        data += part
    return data


def main() -> None:
    """The child: batches of flat spans from stdin, exported over OTLP/HTTP until stdin ends."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource

    settings = json.loads(sys.argv[1])
    exporter = OTLPSpanExporter(endpoint=settings["endpoint"])
    resource = Resource(settings["resource"])
    stream = sys.stdin.buffer
    while head := _read(stream, 4):
        body = _read(stream, int.from_bytes(head, "big"))
        if not body:
            break
        exporter.export([rebuilt(values, resource) for values in pickle.loads(body)])
    exporter.shutdown()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
