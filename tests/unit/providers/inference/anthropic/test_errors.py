"""Anthropic's error envelope as the stack's errors."""

from __future__ import annotations

import httpx2
import pytest

from providers.inference.anthropic.errors import from_envelope, from_response


def envelope(kind: str, message: str = "it failed") -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.mark.parametrize(("status", "kind", "expected_status", "expected_type"), [
    (400, "invalid_request_error", 400, "invalid_request_error"),
    (401, "authentication_error", 401, "authentication_error"),
    (403, "permission_error", 403, "permission_error"),
    (404, "not_found_error", 404, "invalid_request_error"),
    (429, "rate_limit_error", 429, "rate_limit_error"),
    (500, "api_error", 500, "server_error"),
    (529, "overloaded_error", 503, "service_unavailable"),
])
def test_statuses_and_types_for_openai_shaped_clients(status: int, kind: str, expected_status: int, expected_type: str) -> None:
    error = from_envelope("claude", envelope(kind), status)
    assert (error.status, error.error_type, error.message) == (expected_status, expected_type, "it failed")


def test_a_429_keeps_retry_after_and_a_missing_model_names_the_param() -> None:
    response = httpx2.Response(429, headers={"retry-after": "7", "x-other": "1"}, json=envelope("rate_limit_error"))
    error = from_response("claude", response)
    assert error.status == 429 and error.headers == {"retry-after": "7"}
    missing = from_envelope("claude", envelope("not_found_error", "model: claude-nope"), 404)
    assert (missing.param, missing.code) == ("model", "model_not_found")


def test_the_pass_through_keeps_anthropics_529_and_types() -> None:
    error = from_envelope("claude", envelope("overloaded_error", "Overloaded"), 529, openai_shaped=False)
    assert (error.status, error.error_type) == (529, "overloaded_error")
    assert from_envelope("claude", {"error": "nope"}, 500, openai_shaped=False).error_type == "api_error"


def test_a_stream_error_event_gets_its_types_status_and_a_body_that_is_not_json_its_text() -> None:
    assert from_envelope("claude", envelope("rate_limit_error")).status == 429
    error = from_response("claude", httpx2.Response(502, text="Bad gateway"))
    assert (error.status, error.message) == (502, "Bad gateway")
