"""Structured logs (run.yaml `server.logging`): each line carries the request id, the trace id and
the principal of the request it was written in, as one JSON object (`format: json`) or as
`key=value` pairs after the message (`format: text`); and, with `access_log`, one line per request,
with the model it asked for. `format: console` is for a person at a terminal (the starter): the
time and the message, and an access line that reads `12:04:31 POST /v1/chat/completions 200 1.42 s
local/smollm2-135m-instruct`.

Lines are handed to a thread that formats and writes them in batches (`BatchWriter`), so a request
never waits on its terminal or pipe. Off (no `server.logging`), no
context is kept per request and the server logs plain text as before.

The trace id is the current OpenTelemetry span's when tracing is on, else the one a caller sent
in its `traceparent` header, so lines can be joined to a gateway's traces either way.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import datetime
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_json

from builder.config import LoggingConfig
from contract.caller import principal_id
from runtime.observability.tracing import current_trace_id

__all__ = ["BatchWriter", "ConsoleFormatter", "ContextFilter", "JsonFormatter", "TextFormatter", "access_record", "configure",
           "enter_request", "leave_request", "log_access", "note_model"]

# [request id, the request's ASGI headers, the model it asked for]: set by RequestGuard when logs are
# structured; the model is noted when the inference router resolves it (`note_model`). The caller's
# traceparent is read from the headers only when a line is written.
_request: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("log_request", default=None)

CONTEXT_FIELDS = ("request_id", "trace_id", "principal")
ACCESS_LOGGER = "stack.access"
_access = logging.getLogger(ACCESS_LOGGER)
_writer: BatchWriter | None = None
"""The server's writer, once `configure` has made it: access lines are queued to it directly."""


def enter_request(request_id: str, headers: Any) -> contextvars.Token[list[Any] | None]:
    """Make `request_id` (and the trace id of a `traceparent` among `headers`, ASGI pairs) the
    context of the lines written until `leave_request`."""
    return _request.set([request_id, headers, None])


def leave_request(token: contextvars.Token[list[Any] | None]) -> None:
    _request.reset(token)


def note_model(model: str) -> None:
    """The model the request in hand asked for, for its access line (nothing outside a request,
    or with logs off)."""
    held = _request.get()
    if held is not None:
        held[2] = model


def _caller_trace_id(headers: Any) -> str | None:
    for name, value in headers:
        if name == b"traceparent":
            parts = value.decode("latin-1").split("-")
            if len(parts) == 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
                return str(parts[1].lower())
            return None
    return None


def _context(request: list[Any] | None, span_trace_id: str | None) -> tuple[str | None, str | None]:
    """The request id and trace id of `request` (None, None outside one)."""
    if request is None:
        return None, span_trace_id
    return request[0], span_trace_id or _caller_trace_id(request[1])


def _stamp(record: logging.LogRecord) -> None:
    """Put on `record` the context of the request it is written in (in that request's task)."""
    record.request_id, record.trace_id = _context(_request.get(), current_trace_id())
    if getattr(record, "principal", None) is None:
        record.principal = principal_id()


ACCESS_MESSAGE = "%s %s %d %.2fms"


AccessFacts = tuple[float, str | None, str | None, str | None, str, str, int, float, str | None]
"""What an access line is made of: time, request id, trace id, principal, method, path, status,
duration in ms, model (atomic values: a queued line holds nothing of its request alive for the
collector to walk)."""


def _access_fields(method: str, path: str, status: int, duration_ms: float, model: str | None = None) -> dict[str, Any]:
    fields = {"method": method, "path": path, "status": status, "duration_ms": duration_ms}
    if model is not None:
        fields["model"] = model
    return fields


def access_record(method: str, path: str, status: int, duration_ms: float, principal: str | None,
                  model: str | None = None) -> logging.LogRecord:
    """The access line of a request, made directly: `Logger.info` would also look up its caller's
    frame, for nothing here."""
    record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, "", 0, ACCESS_MESSAGE, (method, path, status, duration_ms), None)
    record.principal = principal
    record.fields = _access_fields(method, path, status, duration_ms, model)
    return record


def log_access(method: str, path: str, status: int, duration_ms: float, principal: str | None) -> None:
    """Write the access line of the request in hand (at info, on the `stack.access` logger).

    Under the server's writer (`configure`), the line is made from its facts (`AccessFacts`)
    without a LogRecord, by an f-string (1.5 to 3 µs), and queued; the writing thread only writes.
    (A record formatted in the request cost +42 µs; formatting a batch of facts in the thread took
    the interpreter lock from the event loop, bench/README.) Elsewhere (the library client) the
    record takes the standard path, to whatever handlers the application has."""
    if not _access.isEnabledFor(logging.INFO):
        return
    request = _request.get()
    model = request[2] if request is not None else None
    writer = _writer
    if writer is not None:
        writer.queue_access((time.time(), *_context(request, current_trace_id()), principal, method, path, status, duration_ms, model))
    else:
        _access.handle(access_record(method, path, status, duration_ms, principal, model))


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


_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def _now(created: float) -> str:
    """`created` in ISO 8601 UTC to the millisecond; the date and time of day are made once a second
    (a `datetime` a line was a third of a JSON line's formatting)."""
    global _second
    whole = int(created)
    second = _second  # read once: the writing thread formats lines too
    if whole != second[0]:
        second = _second = (whole, datetime.datetime.fromtimestamp(whole, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{second[1]}.{int((created - whole) * 1000):03d}+00:00"


def _json_line(created: float, level: str, logger: str, message: str, fields: dict[str, Any],
               exception: str | None = None) -> str:
    entry: dict[str, Any] = {"time": _now(created), "level": level, "logger": logger, "message": message, **fields}
    if exception:
        entry["exception"] = exception
    return to_json(entry, fallback=str).decode()  # pydantic-core's codec: a third of json.dumps' time here


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the request's
    context, the record's `fields` (the access log's method, path, status...), and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        return _json_line(record.created, record.levelname.lower(), record.name, record.getMessage(), _fields(record),
                          record.exc_text)

    def format_access(self, facts: AccessFacts) -> str:
        """The access line of `facts`, as `format` writes its record (the same keys in the same
        order), made without the record and without a dict: an f-string, with only the strings a
        client chose (path, principal, model) escaped, and then only when they need it. 2.9 µs a
        line where the record's way took 5.8 (this runs for every request, on the server's core)."""
        created, request_id, trace_id, principal, method, path, status, duration_ms, model = facts
        # The request id is ours, a trace id hex (ours, or checked when a caller sent it), a method an
        # HTTP token (no quote, no backslash): written as they are.
        context = (f',"request_id":"{request_id}"' if request_id is not None else "") + (
            f',"trace_id":"{trace_id}"' if trace_id is not None else "") + (
            f',"principal":{_string(principal)}' if principal is not None else "")
        return (f'{{"time":"{_now(created)}","level":"info","logger":"{ACCESS_LOGGER}",'
                f'"message":{_string(ACCESS_MESSAGE % (method, path, status, duration_ms))}{context},"method":"{method}",'
                f'"path":{_string(path)},"status":{status:d},"duration_ms":{float(duration_ms)!r}'
                + (f',"model":{_string(model)}}}' if model is not None else "}"))


def _string(value: str) -> str:
    """`value` as a JSON string: as it is between quotes when it is printable ASCII without a quote
    or a backslash (three C-level tests, a tenth of a regex's time), else escaped by the codec."""
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return to_json(value).decode()


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

    def format_access(self, facts: AccessFacts) -> str:
        """The access line of `facts` as `format` writes its record, made without the record
        (2 µs where the record's way took 8.5: it runs for every request)."""
        created, request_id, trace_id, principal, method, path, status, duration_ms, model = facts
        whole = int(created)
        second = self._second
        if whole != second[0]:
            second = self._second = (whole, time.strftime(self.default_time_format, self.converter(whole)))
        context = "".join(f" {name}={value}" for name, value in (("request_id", request_id), ("trace_id", trace_id),
                                                                  ("principal", principal)) if value is not None)
        return (f"{second[1]},{int((created - whole) * 1000):03d} INFO {ACCESS_LOGGER}: {ACCESS_MESSAGE % (method, path, status, duration_ms)}"
                f"{context} method={method} path={path} status={status} duration_ms={duration_ms}" + (f" model={model}" if model is not None else ""))

    _second: tuple[int, str] = (-1, "")


class ConsoleFormatter(logging.Formatter):
    """For a person at a terminal: the time of day and the message (the level when it is not
    info), and an access line of method, path, status, duration and model."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if record.levelno != logging.INFO:
            time_of_day, _, rest = line.partition(" ")
            line = f"{time_of_day} {record.levelname} {rest}"
        return line

    def format_access(self, facts: AccessFacts) -> str:
        created, _, _, _, method, path, status, duration_ms, model = facts
        duration = f"{duration_ms:.0f} ms" if duration_ms < 1000 else f"{duration_ms / 1000:.2f} s"
        return f"{time.strftime('%H:%M:%S', time.localtime(created))} {method} {path} {status} {duration}" + (f" {model}" if model else "")


class BatchWriter(logging.Handler):
    """Stamps each record with its request's context and formats it as it is written, then
    queues the line; a thread writes what has queued every `interval_s` in one write, so a
    request never waits on the terminal or pipe. Lines rather than records wait in the queue
    (nothing the garbage collector must track outlives its request); access lines are made from
    their facts without a record (`queue_access`)."""

    def __init__(self, formatter: JsonFormatter | TextFormatter | ConsoleFormatter, stream: Any = None, interval_s: float = 0.05) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self._formatter = formatter
        self._owned = stream is None
        self.stream = stream if stream is not None else _lasting_stderr()
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

    def queue_access(self, facts: AccessFacts) -> None:
        # Formatted here, on the request's thread (2.9 µs a JSON line): the writing thread then only
        # joins and writes, and holds the interpreter lock for as little as that; formatting a
        # batch there took the lock from the event loop in the middle of its requests.
        line = self._access_line(facts)
        if line is not None:
            self._lines.append(line)

    def _access_line(self, facts: AccessFacts) -> str | None:
        try:
            return self._formatter.format_access(facts)
        except Exception:  # reported as a record would be, never lost silently
            self.handleError(access_record(*facts[4:8], facts[3], facts[8]))
            return None

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
        global _writer
        if _writer is self:
            _writer = None
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._owned and self.stream is not sys.stderr:
            with contextlib.suppress(OSError, ValueError):
                self.stream.close()
        super().close()


def _lasting_stderr() -> Any:
    """stderr through a descriptor of its own. llama.cpp's loader (llama-cpp-python with
    `verbose=False`, as the local provider runs it) silences the process by putting /dev/null on
    descriptors 1 and 2 for a moment, while it loads a model or compiles a grammar; lines this
    thread wrote to descriptor 2 then were lost (the start-up's `serving ... on` line, now and
    then). A duplicate made here keeps pointing at the real stderr."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    except (AttributeError, OSError, ValueError):  # no descriptor behind sys.stderr (a test's capture)
        return sys.stderr


def configure(config: LoggingConfig, stream: Any = None) -> BatchWriter:
    """Send the root logger's records, formatted as `config` says, to `stream` (stderr) by a
    writing thread; the caller closes the returned handler at exit (which writes what is queued)."""
    global _writer
    formatter = {"json": JsonFormatter, "text": TextFormatter, "console": ConsoleFormatter}[config.format]()
    handler = BatchWriter(formatter, stream)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(config.level.upper())
    _writer = handler
    return handler
