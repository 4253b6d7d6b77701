"""Structured logs (run.yaml `server.logging`): each line carries the request id, the trace id and
the principal of the request it was written in, as one JSON object (`format: json`) or as
`key=value` pairs after the message (`format: text`); and, with `access_log`, one line per request.

Lines are handed to a thread that formats and writes them in batches (`BatchWriter`), so a request
never waits on its terminal or pipe. Off (no `server.logging`), no
context is kept per request and the server logs plain text as before.

The trace id is the current OpenTelemetry span's when tracing is on, else the one a caller sent
in its `traceparent` header, so lines can be joined to a gateway's traces either way.
"""

from __future__ import annotations

import collections
import contextvars
import datetime
import logging
import sys
import threading
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_json

from builder.config import LoggingConfig
from runtime.auth import principal_id

__all__ = ["BatchWriter", "ContextFilter", "JsonFormatter", "TextFormatter", "access_record", "configure", "enter_request",
           "leave_request"]

# (request id, trace id from the caller's traceparent): set by RequestGuard when logs are structured.
_request: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar("log_request", default=None)

CONTEXT_FIELDS = ("request_id", "trace_id", "principal")
ACCESS_LOGGER = "stack.access"



def enter_request(request_id: str, headers: Any) -> contextvars.Token[tuple[str, str | None] | None]:
    """Make `request_id` (and the trace id of a `traceparent` among `headers`, ASGI pairs) the
    context of the lines written until `leave_request`."""
    trace_id = None
    for name, value in headers:
        if name == b"traceparent":
            parts = value.decode("latin-1").split("-")
            if len(parts) == 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
                trace_id = parts[1].lower()
            break
    return _request.set((request_id, trace_id))


def leave_request(token: contextvars.Token[tuple[str, str | None] | None]) -> None:
    _request.reset(token)


def _span_trace_id() -> str | None:
    trace = sys.modules.get("opentelemetry.trace")  # loaded only when tracing is configured
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def _stamp(record: logging.LogRecord) -> None:
    """Put on `record` the context of the request it is written in (in that request's task)."""
    request = _request.get()
    record.request_id = request[0] if request is not None else None
    record.trace_id = _span_trace_id() or (request[1] if request is not None else None)
    if getattr(record, "principal", None) is None:
        record.principal = principal_id()


def access_record(method: str, path: str, status: int, duration_ms: float, principal: str | None) -> logging.LogRecord:
    """The access line of a request, made directly: `Logger.info` would also look up its caller's
    frame, for nothing here."""
    record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, "", 0, "%s %s %d %.2fms", (method, path, status, duration_ms), None)
    record.principal = principal
    record.fields = {"method": method, "path": path, "status": status, "duration_ms": duration_ms}
    return record


class ContextFilter(logging.Filter):
    """Stamps each record with the context of the request it was written in, for an application's
    own handlers (the library client); `BatchWriter` stamps its records itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        _stamp(record)
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = {name: value for name in CONTEXT_FIELDS if (value := getattr(record, name, None)) is not None}
    extra = getattr(record, "fields", None)
    if isinstance(extra, Mapping):
        fields.update(extra)
    return fields


def _now(created: float) -> str:
    return datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the request's
    context, the record's `fields` (the access log's method, path, status...), and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _now(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return to_json(entry, fallback=str).decode()  # pydantic-core's codec: a third of json.dumps' time here


class TextFormatter(logging.Formatter):
    """The plain layout, with the request's context and fields as `key=value` after the message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = " ".join(f"{name}={value}" for name, value in _fields(record).items())
        if not pairs:
            return line
        head, newline, rest = line.partition("\n")  # an exception's traceback stays below
        return f"{head} {pairs}{newline}{rest}"


class BatchWriter(logging.Handler):
    """Stamps each record with its request's context and formats it as it is written, then
    queues the line; a thread writes what has queued every `interval_s` in one write, so a
    request never waits on the terminal or pipe. Lines rather than records wait in the queue
    (nothing the garbage collector must track outlives its request)."""

    def __init__(self, formatter: logging.Formatter, stream: Any = None, interval_s: float = 0.05) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self._lines: collections.deque[str] = collections.deque()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-logs", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        _stamp(record)
        try:
            self._lines.append(self.format(record))
        except Exception:  # a record that cannot be formatted is reported, never lost silently
            self.handleError(record)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._drain()
        self._drain()

    def _drain(self) -> None:
        if not self._lines:
            return
        out: list[str] = []
        while self._lines:
            out.append(self._lines.popleft())
        try:
            self.stream.write("\n".join(out) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # the stream is gone (a closed pipe): nothing to write to

    def close(self) -> None:
        """Write what is queued and stop the thread."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        super().close()


def configure(config: LoggingConfig, stream: Any = None) -> BatchWriter:
    """Send the root logger's records, formatted as `config` says, to `stream` (stderr) by a
    writing thread; the caller closes the returned handler at exit (which writes what is queued)."""
    handler = BatchWriter(JsonFormatter() if config.format == "json" else TextFormatter(), stream)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(config.level.upper())
    return handler
