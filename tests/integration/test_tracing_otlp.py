"""Traces exported over OTLP/HTTP (runtime.observability.span_export): a `stack run` server sends
its spans, through the exporting child process, to a collector (an HTTP server on 127.0.0.1 that
keeps each posted body); the bodies decode as OTLP with the same span tree the in-memory exporter
shows, while the server runs and, for the last requests, when it stops."""

from __future__ import annotations

import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fake_upstream.server import running_fake_upstream
from runtime.testing.targets import open_target
from support.live_stack import run_yaml


class Collector(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                collector.bodies.append(self.rfile.read(int(self.headers["content-length"])))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def spans(self) -> list[Any]:
        found = []
        for body in list(self.bodies):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource_spans in request.resource_spans:
                service = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}["service.name"]
                for scope_spans in resource_spans.scope_spans:
                    found += [(service, span) for span in scope_spans.spans]
        return found


@pytest.fixture()
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def attributes(span: Any) -> dict[str, Any]:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in span.attributes}


def test_spans_reach_the_collector_while_the_server_runs_and_the_last_ones_when_it_stops(collector: Collector, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, name="otlp")
        path.write_text(path.read_text() + f"server:\n  tracing: {{exporter: otlp, otlp_endpoint: '{endpoint}', service_name: otlp-test}}\n")
        with open_target(f"server:{path}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            with target.openai(max_retries=0) as client:
                client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:3] hi"}])
                deadline = time.monotonic() + 10
                while not collector.spans() and time.monotonic() < deadline:
                    time.sleep(0.05)
                running = collector.spans()
                assert running, "no span exported while the server runs"
                client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:2] last"}])
        # The server has stopped: its last request's spans were sent on the way out.
    found = collector.spans()
    servers = [span for service, span in found if span.name == "POST /v1/chat/completions" and service == "otlp-test"]
    calls = [span for _, span in found if span.name == "chat fake-model"]
    assert len(servers) == 2 and len(calls) == 2
    for server in servers:
        (call,) = [span for span in calls if span.parent_span_id == server.span_id]
        assert call.trace_id == server.trace_id and attributes(call)["gen_ai.provider.name"] == "fake"
        assert attributes(server)["http.route"] == "/v1/chat/completions" and attributes(server)["http.response.status_code"] == 200
        assert server.kind == server.SPAN_KIND_SERVER and call.kind == call.SPAN_KIND_CLIENT
        assert server.end_time_unix_nano > server.start_time_unix_nano
    assert sorted(attributes(call)["gen_ai.usage.output_tokens"] for call in calls) == [2, 3]


def test_a_batch_that_cannot_be_sent_is_dropped_and_a_dead_child_is_started_again(collector: Collector) -> None:
    import asyncio
    import signal

    from runtime.observability.span_export import PipeSpanProcessor
    from runtime.observability.spans import SERVER, Span

    endpoint = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"

    async def run() -> None:
        pipe = PipeSpanProcessor(endpoint, {"service.name": "pipe-test"})
        Span(pipe.add, "unpicklable", SERVER, None, {"value": lambda: None}).end()  # a value pickle refuses
        await pipe._send()
        assert pipe._dropped == 1
        Span(pipe.add, "first", SERVER, None).end()
        await pipe._send()
        child = pipe._child
        assert child is not None
        deadline = time.monotonic() + 10
        while not any(span.name == "first" for _, span in collector.spans()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        await child.wait()
        Span(pipe.add, "after", SERVER, None).end()
        await pipe._send()
        assert pipe._child is not child  # started again
        await pipe.aclose()

    asyncio.run(run())
    names = [span.name for _, span in collector.spans()]
    assert names.count("first") == 1 and names.count("after") == 1 and "unpicklable" not in names
