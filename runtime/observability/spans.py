"""The spans the server records: plain objects that end as a tuple of plain values
(`runtime.observability.span_export.Flat`), handed to a sink (the OTLP exporting process, or the
SDK's in-memory and console exporters).

The OpenTelemetry SDK's span (a lock, bounded attribute mappings checked value by value, a
ReadableSpan made at its end, processors called through a multi-processor) cost about 35 µs of the
event loop's time per span here, 70 µs per sampled chat request: at a ratio of 10 %, more than
everything else the tracing did. What a span of ours does is what the server needs: W3C trace and
span ids, a parent from the current span or the caller's `traceparent`, attributes, an error
status, an exception event, an end time. The SDK still encodes and exports them (in the child, or
as ReadableSpans for its in-memory and console exporters), so what reaches a collector is what the
SDK makes of it.
"""

from __future__ import annotations

import contextvars
import random
import re
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["CLIENT", "INTERNAL", "SERVER", "Span", "current_span", "parse_traceparent"]

INTERNAL, SERVER, CLIENT = 0, 1, 2  # OTLP's span kinds (SpanKind values)
_UNSET, _ERROR = 0, 2  # StatusCode values
_SAMPLED = 1

Sink = Callable[[tuple[Any, ...]], None]


class Span:
    """One operation of a trace, recording until `end`."""

    __slots__ = ("name", "trace_id", "span_id", "parent_id", "parent_remote", "kind", "start", "attributes", "status",
                 "description", "events", "_sink")
    trace_id: int
    span_id: int
    parent_id: int | None
    parent_remote: bool

    def __init__(self, sink: Sink, name: str, kind: int, parent: Span | tuple[int, int] | None,
                 attributes: dict[str, Any] | None = None) -> None:
        self._sink = sink
        self.name = name
        self.kind = kind
        if isinstance(parent, Span):
            self.trace_id, self.parent_id, self.parent_remote = parent.trace_id, parent.span_id, False
        elif parent is not None:  # the caller's (trace id, span id), from its traceparent
            (self.trace_id, self.parent_id), self.parent_remote = parent, True
        else:
            self.trace_id, self.parent_id, self.parent_remote = random.getrandbits(128) or 1, None, False
        self.span_id = random.getrandbits(64) or 1
        self.start = time.time_ns()
        self.attributes: dict[str, Any] = attributes if attributes is not None else {}
        self.status = _UNSET
        self.description: str | None = None
        self.events: list[tuple[str, dict[str, Any], int]] = []

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = tuple(value) if isinstance(value, list) else value

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def update_name(self, name: str) -> None:
        self.name = name

    def is_recording(self) -> bool:
        return True

    def set_error(self, description: str | None = None) -> None:
        self.status, self.description = _ERROR, description

    def record_exception(self, error: BaseException) -> None:
        """An `exception` event, as the SDK records one."""
        self.events.append(("exception", {
            "exception.type": type(error).__qualname__, "exception.message": str(error),
            "exception.stacktrace": "".join(traceback.format_exception(error)), "exception.escaped": "False"}, time.time_ns()))

    def failed(self, error: BaseException) -> None:
        """What the SDK records of an exception leaving a span's block: the event, and the error status."""
        self.record_exception(error)
        self.set_error(f"{type(error).__name__}: {error}")

    def end(self) -> None:
        self._sink((self.name, self.trace_id, self.span_id, _SAMPLED, [], self.parent_id, self.parent_remote, self.kind, self.start,
                    time.time_ns(), self.attributes, self.status, self.description, self.events, [], "stack"))


_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar("span", default=None)


def current_span() -> Span | None:
    """The span current in this context (the request's, or a tool call's or a store's inside it)."""
    return _span.get()


def enter_span(span: Span) -> contextvars.Token[Span | None]:
    return _span.set(span)


def leave_span(token: contextvars.Token[Span | None]) -> None:
    _span.reset(token)


_TRACEPARENT = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def parse_traceparent(value: bytes) -> tuple[int, int, bool] | None:
    """The caller's trace id, span id and whether it sampled, from a W3C `traceparent` header
    (version 00, or a later version's first four fields); None when it is malformed."""
    found = _TRACEPARENT.fullmatch(value.strip())
    if found is None or found[1] == b"ff" or (found[1] == b"00" and found[5] is not None):
        return None
    trace_id, span_id = int(found[2], 16), int(found[3], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, bool(int(found[4], 16) & _SAMPLED)
