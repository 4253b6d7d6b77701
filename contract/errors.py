"""Errors that reach clients, in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}`.

    APIError                      500 server_error (base: never raised for a client's mistake)
    ├── InvalidRequestError       400 invalid_request_error
    ├── AuthenticationError       401 authentication_error
    ├── NotFoundError             404 invalid_request_error
    ├── ConflictError             409 invalid_request_error
    ├── PayloadTooLargeError      413 invalid_request_error
    ├── FailedDependencyError     424 external_connector_error (a tool's server, e.g. MCP, failed)
    ├── UpstreamError             the upstream's 4xx/5xx, or 502 when it could not be reached
    └── ServiceUnavailableError   503 service_unavailable
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

__all__ = [
    "APIError",
    "AuthenticationError",
    "ConflictError",
    "FailedDependencyError",
    "InvalidRequestError",
    "JSON_INVALID_MESSAGE",
    "NotFoundError",
    "PayloadTooLargeError",
    "ServiceUnavailableError",
    "UpstreamError",
    "error_body",
]


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


JSON_INVALID_MESSAGE = "We could not parse the JSON body of your request: it is not valid JSON."


def validation_error_body(errors: Sequence[Any]) -> dict[str, Any]:
    """The 400 body of a request pydantic refused (its errors, as `ValidationError.errors()` lists
    them): the first problem, named by its path in the body."""
    first: dict[str, Any] = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
    param = ".".join(loc) or None
    kind = first.get("type", "")
    if kind == "json_invalid":  # its location is a position in the text, not a parameter
        message, code, param = JSON_INVALID_MESSAGE, "invalid_json", None
    elif kind == "missing":
        message, code = f"Missing required parameter: '{param}'.", "missing_required_parameter"
    else:
        got = first.get("input")
        message = f"Invalid value for '{param}': {first.get('msg', 'invalid')}" + (f" (got {got!r:.80})." if got is not None else ".")
        code = "invalid_value"
    if len(errors) > 1:
        message += f" ({len(errors) - 1} more problem(s) in the request.)"
    return error_body(message, "invalid_request_error", param, code)


class APIError(Exception):
    """An error with an HTTP status and an OpenAI error envelope."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status_code or self.status_code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.param, self.code)


class InvalidRequestError(APIError):
    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationError(APIError):
    status_code = 401
    error_type = "authentication_error"


class NotFoundError(APIError):
    status_code = 404
    error_type = "invalid_request_error"


class ConflictError(APIError):
    status_code = 409
    error_type = "invalid_request_error"


class PayloadTooLargeError(APIError):
    status_code = 413
    error_type = "invalid_request_error"


class FailedDependencyError(APIError):
    """A server a request's tool depends on could not be used (OpenAI's answer when an MCP
    server cannot list its tools)."""

    status_code = 424
    error_type = "external_connector_error"


class UpstreamError(APIError):
    """An upstream model server's error, passed on with its status; 502 if it could not be reached."""

    status_code = 502
    error_type = "upstream_error"

    def __init__(self, message: str, *, error_type: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        if error_type:
            self.error_type = error_type  # type: ignore[misc]  # per-instance override of the class default


class ServiceUnavailableError(APIError):
    status_code = 503
    error_type = "service_unavailable"
