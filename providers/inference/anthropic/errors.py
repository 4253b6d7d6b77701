"""Anthropic's errors as the stack's: the envelope `{"type": "error", "error": {"type", "message"}}`,
answered with an HTTP status or sent as a stream's `error` event, becomes an `UpstreamError` that
keeps the status (and `retry-after`) and the message.

For OpenAI-shaped clients (chat, Responses) a 529 `overloaded_error`, a status only Anthropic uses, is
a 503 (which the openai SDK retries as it retries any 5xx); the Messages pass-through keeps 529 and
Anthropic's own error type, which its clients know."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx2

from contract.errors import UpstreamError
from providers.inference.upstream_errors import default_type

__all__ = ["STATUS_OF_TYPE", "from_envelope", "from_response"]

PASSED_HEADERS = ("retry-after", "retry-after-ms")

STATUS_OF_TYPE = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
}
"""The HTTP status Anthropic answers each error type with (a stream's `error` event has none)."""

_OPENAI_TYPES = {
    "invalid_request_error": "invalid_request_error", "authentication_error": "authentication_error",
    "permission_error": "permission_error", "not_found_error": "invalid_request_error", "request_too_large": "invalid_request_error",
    "rate_limit_error": "rate_limit_error", "billing_error": "insufficient_quota", "api_error": "server_error",
    "timeout_error": "server_error", "overloaded_error": "service_unavailable",
}


def from_envelope(provider_id: str, document: Any, status: int | None = None, headers: Mapping[str, str] | None = None, *,
                  openai_shaped: bool = True) -> UpstreamError:
    """The error an Anthropic error envelope (or any JSON an error status came with) stands for."""
    detail = document.get("error") if isinstance(document, dict) else None
    if isinstance(detail, str):
        detail = {"message": detail}
    if not isinstance(detail, dict):
        detail = {}
    kind = str(detail.get("type") or "")
    status = status or STATUS_OF_TYPE.get(kind, 502)
    message = str(detail.get("message") or f"inference provider '{provider_id}' answered HTTP {status}")
    kept = {name: headers[name] for name in PASSED_HEADERS if headers is not None and name in headers}
    if not openai_shaped:
        anthropic_type = kind or next((name for name, code in STATUS_OF_TYPE.items() if code == status), "api_error")
        return UpstreamError(message, status_code=status, error_type=anthropic_type, headers=kept)
    param, code = None, None
    if kind == "not_found_error" and message.startswith("model:"):
        param, code = "model", "model_not_found"
    elif kind == "overloaded_error" or status == 529:
        status, code = 503, "overloaded"
    elif kind == "request_too_large":
        code = "request_too_large"
    return UpstreamError(message, status_code=status, error_type=_OPENAI_TYPES.get(kind) or default_type(status), param=param,
                         code=code, headers=kept)


def from_response(provider_id: str, response: httpx2.Response, *, openai_shaped: bool = True) -> UpstreamError:
    """The error of an answer with a 4xx or 5xx status (its body read)."""
    try:
        document: Any = json.loads(response.content)
    except ValueError:
        document = {"error": {"message": response.text[:500] or f"HTTP {response.status_code}"}}
    return from_envelope(provider_id, document, response.status_code, response.headers, openai_shaped=openai_shaped)
