"""Routes of the Messages API (Anthropic's): `POST /v1/messages` and `/v1/messages/count_tokens`.

Each reads the raw body (a provider may forward the bytes untouched) and makes one call into the
provider, with the client's `anthropic-beta` flags at hand for a model passed through to Anthropic. Errors are raised in this server's usual way; `runtime.http.anthropic` answers them in
Anthropic's envelope for these paths.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from contract.checks import parse_json_object
from contract.inference.protocol import client_beta
from contract.messages.protocol import MessagesProvider
from runtime.apis.common import JSONBytes, json_body, unless_disconnected
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes
from runtime.http.sse import EventStreamResponse, close_frames

__all__ = ["router"]

_BODY = json_body(["model", "messages", "max_tokens"], {
    "model": {"type": "string", "description": "a model the stack serves (GET /v1/models)"},
    "messages": {"type": "array", "items": {"type": "object", "required": ["role", "content"]}},
    "max_tokens": {"type": "integer", "minimum": 1},
    "system": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
    "stream": {"type": "boolean"},
    "tools": {"type": "array", "items": {"type": "object"}},
})
_COUNT_BODY = json_body(["model", "messages"], {
    "model": {"type": "string"},
    "messages": {"type": "array", "items": {"type": "object", "required": ["role", "content"]}},
})


def router(impl: MessagesProvider) -> Routes:
    routes = Routes()

    @routes.post("/messages", summary="Create a message (Anthropic's Messages API; streamed with `stream: true`)", openapi_extra=_BODY)
    async def create_message(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        with client_beta(_beta(request)):  # the request goes out within: the stream's with its first event
            if body.get("stream") is True:
                return await _event_stream(request, await impl.stream_message(body, raw))
            answer = await unless_disconnected(request, impl.create_message(body, raw))
        return Response(status_code=499) if answer is None else Response(answer, media_type="application/json")

    @routes.post("/messages/count_tokens", summary="Count the input tokens of a message request", openapi_extra=_COUNT_BODY)
    async def count_tokens(request: Request) -> Response:
        body = parse_json_object(await read_body(request))
        with client_beta(_beta(request)):
            return JSONBytes(await impl.count_tokens(body))

    return routes


def _beta(request: Request) -> str | None:
    """The `anthropic-beta` header (its lines joined), read from the scope: Starlette's `Headers`
    would be built for it otherwise, on every request."""
    values = [value.decode("latin-1") for name, value in request.scope["headers"] if name == b"anthropic-beta"]
    return ",".join(values) if values else None


async def _event_stream(request: Request, frames: AsyncIterator[bytes]) -> Response:
    """The first frames (message_start, and what the provider made with it) are awaited before the
    200 goes out, so a refusal of the model server is answered with its own status."""
    iterator = aiter(frames)
    try:
        first = await unless_disconnected(request, anext(iterator))
    except StopAsyncIteration:
        first = b""
    if first is None:
        await close_frames(iterator)
        return Response(status_code=499)
    return EventStreamResponse(_frames(first, iterator), flush_after=1)


async def _frames(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for frame in rest:
            yield frame
    finally:
        await close_frames(rest)
