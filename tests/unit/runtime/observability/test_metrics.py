"""runtime.observability.metrics: requests and model calls are counted whether or not a batch has filled by the
time of a scrape, with their route templates, statuses, latencies and tokens."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from runtime.observability.metrics import Metrics, usage_counts


class Route:
    path = "/responses/{response_id}"


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_requests_and_calls_are_counted_across_batches_and_at_a_scrape() -> None:
    metrics = Metrics()
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/v1/responses/resp_1", "route": Route()}
    answer = b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":2}}}'
    for number in range(300):  # more than one batch, and a part of one left for the scrape
        metrics.request_done(scope, 404 if number % 100 == 0 else 200, False, 0.02)
        metrics.call_done("fake", "fake-model", "chat", 0.2, answer)
    counted = samples(metrics)
    route = (("method", "GET"), ("route", "/v1/responses/{response_id}"))
    assert counted[("stack_requests_total", (*route, ("status", "200")))] == 297
    assert counted[("stack_requests_total", (*route, ("status", "404")))] == 3
    assert counted[("stack_request_duration_seconds_bucket", (("le", "0.025"), *route))] == 300
    assert counted[("stack_request_duration_seconds_bucket", (("le", "0.01"), *route))] == 0
    call = (("kind", "chat"), ("model", "fake-model"), ("provider", "fake"))
    assert counted[("stack_upstream_duration_seconds_count", call)] == 300
    tokens = (("model", "fake-model"), ("provider", "fake"))
    assert counted[("stack_tokens_total", (("direction", "in"), *tokens))] == 1500
    assert counted[("stack_tokens_total", (("direction", "out"), *tokens))] == 2100
    assert samples(metrics)[("stack_requests_total", (*route, ("status", "200")))] == 297  # counted once


def test_usage_counts_reads_the_last_usage_and_not_the_nested_details() -> None:
    body = b'{"note":"\\"usage\\": earlier","usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,' \
           b'"completion_tokens_details":{"reasoning_tokens":3}}}'
    assert usage_counts(body) == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    assert usage_counts(b'{"choices":[]}') == {}
