"""runtime.observability.tracing's sampling: a request without a caller's trace is recorded at
`sample_ratio` (decided once, before any span is made), and a caller's trace decides for itself."""

from __future__ import annotations

import random

from builder.config import TracingConfig
from runtime.observability.tracing import Tracing

SAMPLED_PARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED_PARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def recorded(tracing: Tracing, count: int, traceparent: bytes | None = None) -> int:
    headers = [(b"traceparent", traceparent)] if traceparent else []
    made = 0
    for _ in range(count):
        entered = tracing.enter({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}, "req_1")
        if entered is not None:
            made += 1
            tracing.leave(entered, {"method": "POST", "path": "/v1/chat/completions"}, "/v1/chat/completions", 200)
    return made


def test_a_ratio_of_a_tenth_records_a_tenth_of_the_requests_not_a_hundredth() -> None:
    tracing = Tracing(TracingConfig(exporter="memory", sample_ratio=0.1))
    random.seed(50)
    made = recorded(tracing, 4000)
    assert 320 <= made <= 480  # 400 expected; the SDK's own ratio sampler on top had made it about 40
    assert len(tracing.exporter.get_finished_spans()) == made


def test_a_callers_trace_decides_whatever_the_ratio() -> None:
    none = Tracing(TracingConfig(exporter="memory", sample_ratio=0))
    assert recorded(none, 50) == 0
    assert recorded(none, 50, SAMPLED_PARENT) == 50
    every = Tracing(TracingConfig(exporter="memory", sample_ratio=1))
    assert recorded(every, 50, UNSAMPLED_PARENT) == 0
    assert recorded(every, 50) == 50
