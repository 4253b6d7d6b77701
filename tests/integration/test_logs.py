"""Structured logs (`server.logging`) of `stack run`: each line carries the request id, the trace id
and the principal of its request, and the access log has a line per request."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from fake_upstream.server import FakeUpstream
from runtime.testing.targets import free_port
from tests.support.live_stack import run_yaml

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
AUTH = """server:
  auth:
    api_keys: [{key: alice-key, principal: alice, attributes: {team: blue}}]
  logging: %s
"""


@contextmanager
def logging_server(root: Path, upstream: FakeUpstream, logging: str) -> Iterator[tuple[str, list[str]]]:
    """`stack run` with `logging` as its server.logging; yields its /v1 URL and, once it has
    stopped, the lines it wrote to stderr."""
    config = run_yaml(root, upstream.base_url, providers=AUTH % logging, responses="{unserved_tools: omit}", name="logs")
    port, lines = free_port(), []
    errors = root / "stderr.txt"
    with errors.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, errors.read_text()
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline, errors.read_text()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1", lines
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        lines.extend(line for line in errors.read_text().splitlines() if line.strip())


def ask(base_url: str, key: str | None) -> httpx2.Response:
    headers = {"traceparent": TRACEPARENT, **({"authorization": f"Bearer {key}"} if key else {})}
    return httpx2.post(f"{base_url}/responses", headers=headers, timeout=30, json={
        "model": "fake-model", "input": "hello", "tools": [{"type": "web_search"}]})


def test_json_lines_carry_the_request_id_trace_id_and_principal(tmp_path: Path, upstream: FakeUpstream) -> None:
    with logging_server(tmp_path, upstream, "{format: json}") as (base_url, lines):
        answered = ask(base_url, "alice-key")
        refused = ask(base_url, "wrong-key")
    assert answered.status_code == 200 and refused.status_code == 401
    entries: list[dict[str, Any]] = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    request_id = answered.headers["x-request-id"]
    # A line the server wrote while answering (the tool it left out) is joined to its request.
    inside = next(entry for entry in entries if entry["message"].startswith("left out of the model's view"))
    assert inside["request_id"] == request_id
    assert inside["trace_id"] == TRACE_ID
    assert inside["principal"] == "alice"
    accessed = [entry for entry in entries if entry["logger"] == "stack.access"]
    by_id = {entry["request_id"]: entry for entry in accessed}
    served = by_id[request_id]
    assert served["method"] == "POST" and served["path"] == "/v1/responses" and served["status"] == 200
    assert served["model"] == "fake-model"  # the model the request asked for, as it named it
    assert served["principal"] == "alice" and served["trace_id"] == TRACE_ID and served["duration_ms"] > 0
    turned_away = by_id[refused.headers["x-request-id"]]
    assert turned_away["status"] == 401 and "principal" not in turned_away
    # Start-up lines, outside any request, have no request context.
    started = next(entry for entry in entries if entry["message"].startswith("serving logs on"))
    assert "request_id" not in started and "principal" not in started


def test_text_lines_carry_the_context_as_pairs_and_access_lines_can_be_off(tmp_path: Path, upstream: FakeUpstream) -> None:
    with logging_server(tmp_path, upstream, "{format: text, access_log: false}") as (base_url, lines):
        answered = ask(base_url, "alice-key")
    assert answered.status_code == 200
    inside = next(line for line in lines if "left out of the model's view" in line)
    assert f"request_id={answered.headers['x-request-id']}" in inside
    assert f"trace_id={TRACE_ID}" in inside and "principal=alice" in inside
    assert not any("stack.access" in line for line in lines)
    assert not any(line.startswith("{") for line in lines)


def test_the_level_leaves_out_lesser_lines(tmp_path: Path, upstream: FakeUpstream) -> None:
    with logging_server(tmp_path, upstream, "{level: warning}") as (base_url, lines):
        assert ask(base_url, "alice-key").status_code == 200
    # At info the same run writes start-up, access and tool lines (the test above).
    assert not [line for line in lines if json.loads(line)["level"] in ("debug", "info")]


def test_console_lines_say_one_request_each_with_its_model_for_a_person_at_a_terminal(tmp_path: Path, upstream: FakeUpstream) -> None:
    """The starter's logs: a line per request a newcomer can read (`12:04:31 POST /v1/responses
    200 12 ms fake-model`), the time and the message for the rest."""
    import re

    with logging_server(tmp_path, upstream, "{format: console}") as (base_url, lines):
        assert ask(base_url, "alice-key").status_code == 200
        assert httpx2.get(f"{base_url}/models", headers={"authorization": "Bearer alice-key"}, timeout=10).status_code == 200
    assert any(re.fullmatch(r"\d\d:\d\d:\d\d POST /v1/responses 200 \d+ ms fake-model", line) for line in lines), lines
    assert any(re.fullmatch(r"\d\d:\d\d:\d\d GET /v1/models 200 \d+ ms", line) for line in lines), lines  # no model asked for
    assert any(re.fullmatch(r"\d\d:\d\d:\d\d serving logs on http://127.0.0.1:\d+", line) for line in lines), lines
    assert not any(line.startswith("{") or "request_id=" in line for line in lines)
