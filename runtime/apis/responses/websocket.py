"""WebSocket mode of the Responses API (`ws://host/v1/responses`, the openai SDK's
`client.responses.connect()`): the client sends `response.create` messages (a create body with
`type`), and each is answered with the events a streamed POST would send, one response at a time.

A connection keeps what its recent responses said (their input and output items), so a client
that stores nothing (`store: false`) continues a chain by `previous_response_id` within the
connection, and `generate: false` prepares such a context without a model call. Every mistake is
an `error` event (with the status a POST would have had); the socket stays open for the next
message.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from contract import fastjson
from contract.items import new_id, normalize_input
from contract.responses.models import CreateResponse, response_object, shown_event
from contract.responses.protocol import ResponsesProvider
from contract.errors import APIError, InvalidRequestError, error_body, validation_error_body
from runtime.http.middleware import Draining

__all__ = ["serve_connection"]

CACHED_RESPONSES = 32  # per connection: a chain continues from one of its last few responses
_OPENING = frozenset({"response.created", "response.in_progress"})
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_WS_ONLY = ("type", "stream_id", "generate", "stream")


class _Context:
    """What a connection's recent unstored responses said, by response id: the stored response
    their chain continues from (if any), and their items since (input, then output)."""

    def __init__(self) -> None:
        self.items: OrderedDict[str, tuple[str | None, list[dict[str, Any]]]] = OrderedDict()

    def keep(self, response_id: str, stored_parent: str | None, items: list[dict[str, Any]]) -> None:
        self.items[response_id] = (stored_parent, items)
        self.items.move_to_end(response_id)
        while len(self.items) > CACHED_RESPONSES:
            self.items.popitem(last=False)

    def forget(self, response_id: str | None) -> None:
        if response_id is not None:
            self.items.pop(response_id, None)


async def serve_connection(socket: WebSocket, impl: ResponsesProvider) -> None:
    """Answer a connection's `response.create` messages in order, until the client closes it or
    the server shuts down: then the response under way is let finish (or ended with its last event
    when the grace period runs out) and the connection closed with 1012 (service restart), at once
    if it is idle, so that the client reconnects elsewhere."""
    await socket.accept()
    context = _Context()
    draining: Draining | None = getattr(socket.app.state, "draining", None)
    try:
        while True:
            message = await _next_message(socket, draining)
            if message is None:
                await socket.close(1012, "The server is restarting: reconnect.")
                return
            await _answer(socket, impl, message, context)
    except WebSocketDisconnect:
        return


async def _next_message(socket: WebSocket, draining: Draining | None) -> str | None:
    """The client's next message; None once the server shuts down."""
    if draining is None:
        return await socket.receive_text()
    if draining.started:
        return None
    receiving = asyncio.ensure_future(socket.receive_text())
    stopping = asyncio.ensure_future(draining.begun.wait())
    try:
        await asyncio.wait([receiving, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not receiving.done():
            receiving.cancel()
    return receiving.result() if receiving.done() and not receiving.cancelled() else None


async def _answer(socket: WebSocket, impl: ResponsesProvider, message: str, context: _Context) -> None:
    """Answer one message. A continuation that fails (refused, or ended `response.failed`) evicts
    the response it continued from the connection's cache, as the Open Responses specification
    has it: what that response said may be why the turn failed, so the client starts over from
    full context (or from the stored response, which stays in the store)."""
    stream_id: Any = None
    previous: str | None = None
    try:
        body = fastjson.loads(message)  # not the standard library, which takes lone surrogates no model can encode
        if not isinstance(body, dict):
            raise InvalidRequestError("Each message must be a JSON object (a response.create event).", code="invalid_json")
        stream_id = body.get("stream_id")
        previous = body.get("previous_response_id") if isinstance(body.get("previous_response_id"), str) else None
        if body.get("type") != "response.create":
            raise InvalidRequestError(f"Invalid value for 'type': {str(body.get('type'))[:80]!r}. This socket takes 'response.create' "
                                      "events.", param="type", code="invalid_value")
        request = CreateResponse.model_validate({key: value for key, value in body.items() if key not in _WS_ONLY})
        request.stream = True
        kept = context.items.get(previous) if previous is not None else None
        if kept is not None:  # an unstored response of this connection: continued from what it kept
            parent, history = kept
            request = request.model_copy(update={"input": [*history, *normalize_input(request.input)], "previous_response_id": parent})
        if body.get("generate") is False:
            await _warm_up(socket, request, context, previous, stream_id)
            return
        events = await impl.stream_response(request)
    except ValueError as error:  # not JSON, or a body pydantic refused
        context.forget(previous)
        body = validation_error_body(error.errors()) if isinstance(error, ValidationError) else error_body(
            "We could not parse this message: it is not valid JSON.", "invalid_request_error", None, "invalid_json")
        await _send(socket, {"type": "error", "status": 400, **body}, stream_id)
        return
    except APIError as error:
        context.forget(previous)
        await _send(socket, {"type": "error", "status": error.status, **error.body()}, stream_id)
        return
    await _relay(socket, events, request, context, previous if kept is not None else None, stream_id)


async def _relay(socket: WebSocket, events: AsyncIterator[dict[str, Any]], request: CreateResponse, context: _Context,
                 cached: str | None, stream_id: Any) -> None:
    """Send a response's events; `cached`: the connection's unstored response it continues, if any
    (the request names that response's stored parent, and the client sees its own chain)."""
    previous = cached or request.previous_response_id
    include = frozenset(request.include or ())
    sequence = -1
    held: list[dict[str, Any]] = []  # the opening events, until the response has output (as the SSE route holds them)
    try:
        async for event in events:
            sequence = event["sequence_number"]
            if event["type"] == "response.failed":
                context.forget(previous)
            if event["type"] in _TERMINAL and request.store is False:
                response = event["response"]
                context.keep(response["id"], request.previous_response_id, [*normalize_input(request.input), *response["output"]])
            if cached is not None and "response" in event:  # the chain as the client sees it
                event = {**event, "response": {**event["response"], "previous_response_id": previous}}
            if event["type"] in _OPENING and not request.background:
                held.append(event)
                continue
            for opening in held:
                await _send(socket, shown_event(opening, include), stream_id)
            held.clear()
            await _send(socket, shown_event(event, include), stream_id)
    except APIError as error:
        context.forget(previous)
        if held:  # refused before any output: answered as a request refused before it started
            await _send(socket, {"type": "error", "status": error.status, **error.body()}, stream_id)
        else:  # a failure the provider could not turn into response.failed
            await _send(socket, {"type": "error", "status": error.status, "sequence_number": sequence + 1, **error.body()}, stream_id)
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()  # a client gone mid-response: the response is cancelled, as for a dropped SSE stream


async def _warm_up(socket: WebSocket, request: CreateResponse, context: _Context, previous: str | None, stream_id: Any) -> None:
    """`generate: false`: a response with no output whose context later turns continue from."""
    request.check()
    response = response_object(request, new_id("resp"), "completed", conversation_id=request.conversation_id)
    response.update(output=[], previous_response_id=previous, completed_at=response.get("created_at"))
    context.keep(response["id"], request.previous_response_id, normalize_input(request.input))
    await _send(socket, {"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress"}}, stream_id)
    await _send(socket, {"type": "response.completed", "sequence_number": 1, "response": response}, stream_id)


async def _send(socket: WebSocket, event: dict[str, Any], stream_id: Any) -> None:
    if stream_id is not None:
        event = {**event, "stream_id": stream_id}
    await socket.send_text(fastjson.dumps(event).decode())
