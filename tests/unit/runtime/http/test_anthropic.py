"""runtime.http.anthropic: a refusal's status and Anthropic's error type for it."""

from __future__ import annotations

import pytest

from runtime.http.anthropic import anthropic_error, error_type


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (402, "billing_error"), (403, "permission_error"),
    (404, "not_found_error"), (413, "request_too_large"), (429, "rate_limit_error"), (500, "api_error"), (504, "timeout_error"),
    (529, "overloaded_error"), (422, "invalid_request_error"), (502, "api_error"),
])
def test_each_status_has_anthropics_error_type(status: int, kind: str) -> None:
    assert error_type(status) == kind


def test_a_503_is_anthropics_529_and_an_upstreams_529_stays_one() -> None:
    assert anthropic_error(503, "busy", "req_1") == (529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"},
                                                            "request_id": "req_1"})
    assert anthropic_error(529, "Overloaded")[0] == 529
