"""Errors in Anthropic's envelope for the requests of Anthropic's clients.

Every layer of the server refuses in OpenAI's shape (`{"error": {"message", "type", "param",
"code"}}`): the request guard (413, 415, 503), auth and quotas (401, 429), the routes. Claude
Code and the `anthropic` SDKs read Anthropic's: `{"type": "error", "error": {"type", "message"},
"request_id"}`, with 529 for an overloaded server and a `request-id` header. This layer, outermost,
rewrites the one into the other for the Messages routes (and for `/v1/models` when the request says
it is Anthropic's, with `anthropic-version`), so no layer below has two shapes to know. Other
paths pass straight through: one prefix test per request.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AnthropicErrors", "anthropic_error", "error_type"]

_MESSAGES = "/v1/messages"
_MODELS = "/v1/models"

# Anthropic's error types by status (docs.anthropic.com, "Errors"); a status it has no type for
# is an api_error, as Anthropic's own 5xx are.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error", 404: "not_found_error",
          413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    if status in _TYPES:
        return _TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def anthropic_error(status: int, message: str, request_id: str | None = None) -> tuple[int, dict[str, Any]]:
    """The status and body Anthropic would answer: a 503 (this server overloaded or shutting down,
    or an upstream that is) is its 529, which its clients retry."""
    status = 529 if status == 503 else status
    return status, {"type": "error", "error": {"type": error_type(status), "message": message}, "request_id": request_id}


class AnthropicErrors:
    """See the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _anthropic(scope):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def reshaped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", ())
                if type(headers) is not list:  # the guard's is a list of its own, extended in place
                    message["headers"] = headers = list(headers)
                for name, value in headers:
                    if name == b"x-request-id":
                        headers.append((b"request-id", value))
                        break
                if message["status"] >= 400 and _json(headers):
                    held.append(message)  # the body decides what goes out
                    return
            elif held:
                held.append(message)
                if message.get("more_body", False):
                    return
                start, body = _reshaped(held)
                await send(start)
                await send(body)
                return
            await send(message)

        await self.app(scope, receive, reshaped)


def _anthropic(scope: Scope) -> bool:
    path: str = scope["path"]
    if path.startswith(_MESSAGES):
        return True
    return path.startswith(_MODELS) and any(name == b"anthropic-version" for name, _ in scope["headers"])


def _json(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name == b"content-type" and value.startswith(b"application/json") for name, value in headers)


def _reshaped(held: list[Message]) -> tuple[Message, Message]:
    """The held error response (its start, then its body's parts) in Anthropic's envelope; as it
    was when its body is not an OpenAI-shaped error."""
    start, parts = held[0], held[1:]
    body = b"".join(part.get("body", b"") for part in parts)
    try:
        error = json.loads(body)["error"]
        message = str(error["message"])
    except (ValueError, KeyError, TypeError):
        return start, {"type": "http.response.body", "body": body}
    request_id = next((value.decode("latin-1") for name, value in start["headers"] if name == b"x-request-id"), None)
    status, envelope = anthropic_error(start["status"], message, request_id)
    payload = json.dumps(envelope).encode()
    headers = [(name, value) for name, value in start["headers"] if name != b"content-length"]
    headers.append((b"content-length", str(len(payload)).encode()))
    return {**start, "status": status, "headers": headers}, {"type": "http.response.body", "body": payload}
