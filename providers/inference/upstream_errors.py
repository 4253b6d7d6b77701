"""What the remote inference providers (the OpenAI-compatible one and Anthropic's) say when an
upstream cannot be reached or answers an error with no type: one wording for both."""

from __future__ import annotations

import os
import socket
import ssl

import httpx2

from contract.errors import UpstreamError

__all__ = ["default_type", "reason", "unreachable"]


def unreachable(provider_id: str, error: httpx2.HTTPError, timeout_s: float) -> UpstreamError:
    """The 504 of an upstream that did not answer in time, or the 502 of one that could not be reached."""
    if isinstance(error, httpx2.TimeoutException):
        return UpstreamError(f"inference provider '{provider_id}' did not answer within {timeout_s:g} s",
                             status_code=504, code="upstream_timeout")
    return UpstreamError(f"inference provider '{provider_id}' could not be reached: {reason(error)}", code="upstream_unreachable")


def reason(error: BaseException) -> str:
    """Why an exchange failed, in words a client may read: not where the upstream is (its address,
    which a connection error names, is the operator's, and a URL may carry credentials)."""
    if isinstance(error, httpx2.ConnectTimeout):
        return "timed out connecting"
    if isinstance(error, httpx2.ConnectError):
        cause = error.__cause__
        return f"cannot connect ({_os_reason(cause)})" if isinstance(cause, OSError) else "cannot connect"
    return str(error) or type(error).__name__


def _os_reason(error: OSError) -> str:
    # Not its own text, which names the address (asyncio's "Connect call failed ('10.0.0.5', 8000)").
    if isinstance(error, ssl.SSLError):
        return f"TLS: {error.reason or type(error).__name__}"
    if isinstance(error, socket.gaierror):
        return str(error.strerror)  # "Name or service not known"
    return os.strerror(error.errno) if error.errno and error.errno > 0 else type(error).__name__


def default_type(status: int) -> str:
    """The OpenAI error type of an error status that came with none."""
    return {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 429: "rate_limit_error"}.get(status, "server_error" if status >= 500 else "invalid_request_error")
