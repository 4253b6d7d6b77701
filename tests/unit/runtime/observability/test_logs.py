"""runtime.observability.logs: lines carry their request's context; JSON keeps a traceback apart from the
message; the writer thread writes everything queued, in order, by the time it is closed."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from builder.config import LoggingConfig
from runtime.observability import logs


def writer(format: str) -> tuple[logs.BatchWriter, io.StringIO]:
    sink = io.StringIO()
    handler = logs.BatchWriter(logs.JsonFormatter() if format == "json" else logs.TextFormatter(), sink, interval_s=60)
    return handler, sink


def record(message: str, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("stack", logging.WARNING, __file__, 1, message, (), exc_info)  # type: ignore[arg-type]


def test_a_line_written_in_a_request_carries_its_context_and_one_outside_none() -> None:
    handler, sink = writer("json")
    token = logs.enter_request("req_abc", [(b"traceparent", b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")])
    try:
        handler.handle(record("inside"))
    finally:
        logs.leave_request(token)
    handler.handle(record("outside"))
    handler.close()  # writes what is queued
    inside, outside = (json.loads(line) for line in sink.getvalue().splitlines())
    assert inside["message"] == "inside" and inside["request_id"] == "req_abc"
    assert inside["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and inside["level"] == "warning"
    assert outside["message"] == "outside" and "request_id" not in outside and "trace_id" not in outside


def test_a_traceback_is_kept_apart_from_the_message() -> None:
    handler, sink = writer("json")
    try:
        raise RuntimeError("boom")
    except RuntimeError as error:
        handler.handle(record("it failed", (type(error), error, error.__traceback__)))
    handler.close()
    entry = json.loads(sink.getvalue())
    assert entry["message"] == "it failed"
    assert "RuntimeError: boom" in entry["exception"] and "Traceback" in entry["exception"]


def test_text_lines_put_the_context_after_the_message_and_the_traceback_below() -> None:
    handler, sink = writer("text")
    token = logs.enter_request("req_xyz", [])
    try:
        try:
            raise ValueError("bad")
        except ValueError as error:
            handler.handle(record("it failed", (type(error), error, error.__traceback__)))
        handler.handle(logs.access_record("GET", "/v1/models", 200, 1.5, "alice"))
    finally:
        logs.leave_request(token)
    handler.close()
    text = sink.getvalue()
    first = text.splitlines()[0]
    assert first.endswith("stack: it failed request_id=req_xyz")
    assert "ValueError: bad" in text
    access = text.splitlines()[-1]
    assert "stack.access: GET /v1/models 200 1.50ms" in access
    assert "request_id=req_xyz" in access and "principal=alice" in access and "status=200" in access


def test_configure_routes_the_root_logger_and_sets_the_level() -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    sink = io.StringIO()
    try:
        handler = logs.configure(LoggingConfig(format="json", level="warning"), sink)
        logging.getLogger("stack.test").info("left out")
        logging.getLogger("stack.test").error("kept")
        assert not logging.getLogger(logs.ACCESS_LOGGER).isEnabledFor(logging.INFO)  # access lines are info: left out at warning
        handler.close()
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
    assert [json.loads(line)["message"] for line in sink.getvalue().splitlines()] == ["kept"]


def served_access_lines(format: str) -> list[str]:
    """One access line queued by `log_access` under the server's writer and the same line made as
    a record through the standard handler path, both in one request with a traceparent."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    sink = io.StringIO()
    try:
        handler = logs.configure(LoggingConfig(format=format, access_log=True), sink)
        token = logs.enter_request("req_abc", [(b"traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")])
        try:
            logs.log_access("POST", '/v1/responses/"odd"', 200, 12.5, "alice")
            handler.handle(logs.access_record("POST", '/v1/responses/"odd"', 200, 12.5, "alice"))
        finally:
            logs.leave_request(token)
        handler.close()
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
    return sink.getvalue().splitlines()


def test_an_access_line_queued_by_the_server_is_the_line_its_record_makes() -> None:
    queued, made = (json.loads(line) for line in served_access_lines("json"))
    assert queued.pop("time")[:10] == made.pop("time")[:10]
    assert queued == made == {
        "level": "info", "logger": "stack.access", "message": 'POST /v1/responses/"odd" 200 12.50ms',
        "request_id": "req_abc", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "principal": "alice",
        "method": "POST", "path": '/v1/responses/"odd"', "status": 200, "duration_ms": 12.5,
    }
    queued_text, made_text = served_access_lines("text")
    assert queued_text.split(" ", 2)[2] == made_text.split(" ", 2)[2]  # all but the date and time
    assert "stack.access: POST /v1/responses/\"odd\" 200 12.50ms request_id=req_abc" in queued_text


@pytest.mark.parametrize("path, principal, model", [
    ("/v1/chat/completions", "alice", "fake/m"),
    ('/v1/files/a"b\\c', 'p"\u2028', "m\x00\t"),  # quotes, backslashes, a line separator, control characters
    ("/v1/files/\u00e9\x7f", None, None),
    ("/v1/models", "", ""),
])
def test_the_quick_access_lines_are_byte_for_byte_the_records(path: str, principal: str | None, model: str | None) -> None:
    for formatter in (logs.JsonFormatter(), logs.TextFormatter()):
        for created, status, duration_ms in ((1_700_000_000.25, 200, 0.42), (1_700_000_000.999, 404, 12345.67), (1_700_000_001.0, 500, 0.0)):
            record = logs.access_record("GET", path, status, duration_ms, principal, model)
            record.created, record.msecs = created, (created - int(created)) * 1000
            record.request_id, record.trace_id = "req_1", "4bf92f3577b34da6a3ce929d0e0e4736"
            quick = formatter.format_access((created, "req_1", "4bf92f3577b34da6a3ce929d0e0e4736", principal, "GET", path, status,
                                             duration_ms, model))
            assert quick == formatter.format(record)
    assert json.loads(logs.JsonFormatter().format_access((1.0, None, None, principal, "GET", path, 200, 1.0, model)))["path"] == path


def test_outside_the_server_an_access_line_takes_the_standard_handler_path() -> None:
    access = logging.getLogger(logs.ACCESS_LOGGER)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep, level = Keep(), access.level
    access.addHandler(keep)
    access.setLevel(logging.INFO)
    try:
        logs.log_access("GET", "/v1/models", 200, 1.0, None)
    finally:
        access.removeHandler(keep)
        access.setLevel(level)
    assert [record.getMessage() for record in seen] == ["GET /v1/models 200 1.00ms"]
    assert seen[0].fields == {"method": "GET", "path": "/v1/models", "status": 200, "duration_ms": 1.0}


def test_the_console_access_line_reads_as_a_person_would_write_it() -> None:
    import re

    formatter = logs.ConsoleFormatter()
    quick = formatter.format_access((1_700_000_000.25, "req_1", None, "alice", "POST", "/v1/chat/completions", 200, 41.6, "local/m"))
    slow = formatter.format_access((1_700_000_000.25, "req_2", None, None, "GET", "/v1/models", 200, 1234.0, None))
    assert re.fullmatch(r"\d\d:\d\d:\d\d POST /v1/chat/completions 200 42 ms local/m", quick), quick
    assert re.fullmatch(r"\d\d:\d\d:\d\d GET /v1/models 200 1.23 s", slow), slow
    warning = logging.LogRecord("stack", logging.WARNING, "", 0, "disk %s", ("full",), None)
    assert re.fullmatch(r"\d\d:\d\d:\d\d WARNING disk full", formatter.format(warning))


def test_the_model_a_request_asked_for_is_in_its_access_line_and_nothing_is_noted_outside_one() -> None:
    logs.note_model("outside")  # no request: nothing to note it on, and no error
    token = logs.enter_request("req_m", [])
    try:
        logs.note_model("local/m")
        record_model = logs._request.get()[2]  # type: ignore[index]
    finally:
        logs.leave_request(token)
    assert record_model == "local/m"
    assert logs.access_record("GET", "/x", 200, 1.0, None, "local/m").fields["model"] == "local/m"  # type: ignore[attr-defined]


def test_lines_are_not_lost_while_a_library_silences_stderr() -> None:
    """llama.cpp's loader puts /dev/null on descriptor 2 for a moment (llama-cpp-python, verbose=False):
    a line logged meanwhile still reaches the real stderr (it was lost, now and then, at start-up)."""
    import subprocess
    import sys

    script = """
import logging, os
from builder.config import LoggingConfig
from runtime.observability import logs
writer = logs.configure(LoggingConfig(format="console"))
saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 2)
logging.getLogger("stack").info("said while silenced")
writer.close()
os.dup2(saved, 2)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, cwd=Path(__file__).parents[4])
    assert done.returncode == 0, done.stderr
    assert "said while silenced" in done.stderr
