"""The operator's page reads the server's own metrics: counts, and latency bounds from histograms."""

from __future__ import annotations

from runtime.console.operate import _counts, _latency, sampled
from runtime.console.pages import _safe_name

EXPOSITION = b"""# HELP stack_requests_total HTTP requests answered
# TYPE stack_requests_total counter
stack_requests_total{route="/v1/chat/completions",method="POST",status="200"} 90.0
stack_requests_total{route="/v1/chat/completions",method="POST",status="400"} 10.0
# HELP stack_request_duration_seconds Time to a request's last byte
# TYPE stack_request_duration_seconds histogram
stack_request_duration_seconds_bucket{route="/v1/chat/completions",method="POST",le="0.005"} 40.0
stack_request_duration_seconds_bucket{route="/v1/chat/completions",method="POST",le="0.01"} 60.0
stack_request_duration_seconds_bucket{route="/v1/chat/completions",method="POST",le="0.1"} 98.0
stack_request_duration_seconds_bucket{route="/v1/chat/completions",method="POST",le="+Inf"} 100.0
stack_request_duration_seconds_count{route="/v1/chat/completions",method="POST"} 100.0
stack_request_duration_seconds_sum{route="/v1/chat/completions",method="POST"} 1.5
"""


def test_counts_by_route_and_status_most_first() -> None:
    assert _counts(EXPOSITION)["stack_requests_total"] == [("/v1/chat/completions 200", 90.0), ("/v1/chat/completions 400", 10.0)]


def test_latency_is_the_bucket_bounds_of_p50_and_p99() -> None:
    assert _latency(EXPOSITION) == [("request", "/v1/chat/completions POST", 100, "≤ 10 ms", "> last bucket")]


def test_an_uploads_name_keeps_only_harmless_characters() -> None:
    assert _safe_name('../../etc/"passwd"\r\n.txt') == "....etcpasswd.txt" and _safe_name(None) == "upload"


def test_the_live_sample_sums_api_routes_and_leaves_the_consoles_own_out() -> None:
    exposition = EXPOSITION + b"""stack_requests_total{route="/v1/chat/completions",method="POST",status="502"} 3.0
stack_requests_total{route="/console/operate",method="GET",status="200"} 7.0
"""
    sample = sampled(exposition, 12.5)
    assert (sample["t"], sample["requests"], sample["server_errors"]) == (12.5, 103.0, 3.0)
    assert sample["duration"] == [[0.005, 40.0], [0.01, 60.0], [0.1, 98.0], [None, 100.0]]
    assert sample["first_token"] == []
