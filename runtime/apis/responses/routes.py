"""Routes of the Responses API (/v1/responses...). Each is one call into the provider."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.websockets import WebSocket
from starlette.responses import Response

from contract.responses.models import CompactRequest, CreateResponse, shown_event, shown_response
from runtime.apis.common import JSONBytes, include_query, unless_disconnected
from contract.checks import validate_id, validate_limit, validate_order
from contract.responses.protocol import ResponsesProvider
from runtime.apis.responses.schema import COMPACT_BODY, COUNT_BODY, CREATE_BODY
from runtime.apis.responses.websocket import serve_connection
from contract import fastjson
from runtime.http.direct_routes import direct_with_body
from contract.errors import APIError
from runtime.http.routing import Routes
from runtime.http.sse import EventStreamResponse, close_frames, sse_frame

__all__ = ["router"]


def router(impl: ResponsesProvider) -> Routes:
    routes = Routes()

    @routes.post("/responses", summary="Create a response (streamed as events with `stream: true`)", openapi_extra=CREATE_BODY)
    @direct_with_body(CreateResponse)
    async def create_response(request: CreateResponse, http: Request) -> Response:
        include = frozenset(request.include or ())
        if request.stream:
            return _sse(await impl.stream_response(request), include, held=not request.background)
        if request.background:
            return JSONBytes(shown_response(await impl.create_response(request), include))
        # A client that leaves before the answer cancels it (its model and tool calls with it).
        answer = await unless_disconnected(http, impl.create_response(request))
        return Response(status_code=499) if answer is None else JSONBytes(shown_response(answer, include))

    @routes.websocket("/responses")
    async def responses_socket(socket: WebSocket) -> None:
        await serve_connection(socket, impl)

    @routes.post("/responses/compact", summary="Compact a context into its user messages and one compaction item",
                 openapi_extra=COMPACT_BODY)
    @direct_with_body(CompactRequest)
    async def compact_response(request: CompactRequest) -> Response:
        return JSONBytes(await impl.compact_response(request))

    @routes.post("/responses/input_tokens", summary="Count the input tokens a response would use", openapi_extra=COUNT_BODY)
    @direct_with_body(CreateResponse)
    async def count_input_tokens(request: CreateResponse) -> Response:
        return JSONBytes(await impl.count_input_tokens(request))

    @routes.get("/responses", summary="List stored responses")
    async def list_responses(after: str | None = None, limit: int = 20, order: str = "desc") -> Response:
        return JSONBytes(await impl.list_responses(after, validate_limit(limit), validate_order(order)))

    @routes.get("/responses/{response_id}", summary="Get a response, or replay its events with `stream=true`")
    async def get_response(response_id: str, http: Request, stream: bool = False, starting_after: int | None = None) -> Response:
        validate_id(response_id, "response_id", "resp")
        include = include_query(http)
        if stream:
            return _sse(await impl.stream_stored_response(response_id, starting_after), include)
        return JSONBytes(shown_response(await impl.get_response(response_id), include))

    @routes.delete("/responses/{response_id}", summary="Delete a stored response")
    async def delete_response(response_id: str) -> Response:
        validate_id(response_id, "response_id", "resp")
        return JSONBytes(await impl.delete_response(response_id))

    @routes.post("/responses/{response_id}/cancel", summary="Cancel a background response")
    async def cancel_response(response_id: str) -> Response:
        validate_id(response_id, "response_id", "resp")
        return JSONBytes(await impl.cancel_response(response_id))

    @routes.get("/responses/{response_id}/input_items", summary="List a response's input items")
    async def list_input_items(response_id: str, after: str | None = None, limit: int = 20, order: str = "desc") -> Response:
        validate_id(response_id, "response_id", "resp")
        return JSONBytes(await impl.list_input_items(response_id, after, validate_limit(limit), validate_order(order)))

    return routes


_HELD = frozenset({"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"})
"""The events a stream opens with, before its first content: held, and sent in one write with it."""


def _sse(events: AsyncIterator[dict[str, Any]], include: frozenset[str], held: bool = False) -> EventStreamResponse:
    """`held`: the opening events wait for the first content and go out with the status line, so a
    request the model server refuses before any output (a context too long) is answered with that
    error's status, as when not streamed, instead of a stream ending in response.failed."""
    return EventStreamResponse(_frames(events, include, held), flush_after=1 if held else 0)


async def _frames(events: AsyncIterator[dict[str, Any]], include: frozenset[str], held: bool) -> AsyncIterator[bytes]:
    sequence = -1
    head: list[bytes] | None = [] if held else None
    try:
        async for event in events:
            sequence = event["sequence_number"]
            frame = sse_frame(fastjson.dumps(shown_event(event, include)), event["type"])
            if head is None:
                yield frame
                continue
            head.append(frame)
            if event["type"] not in _HELD:
                yield b"".join(head)
                head = None
        if head:
            yield b"".join(head)
    except APIError as error:
        if head is not None:
            raise  # nothing sent yet: the error is the response (runtime.http.sse sends none of the head)
        # Only reached for a failure the provider could not turn into `response.failed`.
        body = {"type": "error", "code": error.code, "message": error.message, "param": error.param, "sequence_number": sequence + 1}
        yield sse_frame(fastjson.dumps(body), "error")
    finally:
        await close_frames(events)  # a client that left while the head was made: the response ends (cancelled) now
