"""Direct routes: the hottest endpoints called without FastAPI's routing layers.

Between the stack's own middleware and an endpoint, FastAPI runs an exception middleware, an exit
stack, the router's matching over every route, the route's request/response wrappers and its
dependency solver: about a fifth of a proxied chat request's CPU (py-spy, c=32; bench/README).
An endpoint marked `direct` that takes only the `Request` (or, marked `direct_with_body(Model)`, its
parsed body and the `Request`) is called straight from `DirectRoutes`, the innermost of the stack's
middleware, when the method and path are exactly its own. A body is parsed here only in the common
case: declared JSON, that parses and validates; any other goes on to FastAPI as it came, so every
mistake is answered exactly as FastAPI answers it. Everything
else about the route stays as it was: it is still registered with FastAPI (the OpenAPI document,
405s, trailing slashes and every other path go through the router), the stack's middleware (request
ids, limits, auth, metrics, logs, traces) runs as before, and an `APIError` it raises is answered
as the app's handler answers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from fastapi import APIRouter
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime import fastjson
from runtime.errors import APIError

__all__ = ["DirectRoutes", "direct", "direct_routes", "direct_with_body"]

Endpoint = Callable[..., Awaitable[Response]]
E = TypeVar("E", bound=Endpoint)
Target = tuple[Endpoint, APIRoute, "type[BaseModel] | None"]

_MARK = "__stack_direct__"
_NO_BODY = object()


def direct(endpoint: E) -> E:
    """Mark a route's endpoint to be called without FastAPI's routing layers. It must take the
    `Request` alone (no parameters for FastAPI to parse, no dependencies) and return a Response."""
    setattr(endpoint, _MARK, _NO_BODY)
    return endpoint


def direct_with_body(model: type[BaseModel]) -> Callable[[E], E]:
    """Mark a route's endpoint that takes a JSON body of `model` and then the `Request` (in that
    order, nothing else) to be called without FastAPI's routing layers."""

    def mark(endpoint: E) -> E:
        setattr(endpoint, _MARK, model)
        return endpoint

    return mark


def direct_routes(routers: Iterable[tuple[APIRouter, str]]) -> dict[tuple[str, str], Target]:
    """(method, path) -> (endpoint, route, body model) for every marked endpoint, at a path without
    parameters, of the (router, prefix it is included under) given."""
    table: dict[tuple[str, str], Target] = {}
    for router, prefix in routers:
        for route in router.routes:
            mark = getattr(route.endpoint, _MARK, None) if isinstance(route, APIRoute) else None
            if mark is not None and isinstance(route, APIRoute) and "{" not in route.path:
                for method in route.methods or ():
                    table[(method, prefix + route.path)] = (route.endpoint, route, None if mark is _NO_BODY else mark)
    return table


class DirectRoutes:
    """ASGI middleware: a request for a direct route goes to its endpoint; any other to `app`."""

    def __init__(self, app: ASGIApp, routes: dict[tuple[str, str], Target]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self.routes.get((scope["method"], scope["path"])) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        endpoint, route, model = target
        scope["route"] = route  # what the router would have set: metrics, logs and traces name it
        request = Request(scope, receive, send)
        try:
            if model is None:
                response = await endpoint(request)
            else:
                raw = await request.body()
                body = _parsed(model, scope, raw)
                if body is None:  # not the common case: FastAPI parses it, and words any mistake
                    await self.app(scope, _replay(raw, receive), send)
                    return
                response = await endpoint(body, request)
        except APIError as error:
            response = api_error_response(error)
        await response(scope, receive, send)


def _parsed(model: type[BaseModel], scope: Scope, raw: bytes) -> BaseModel | None:
    """The body as `model`, when it is declared JSON, parses to an object and validates; else None."""
    if not raw or not _declares_json(scope):
        return None
    try:
        document: Any = fastjson.loads(raw)
    except ValueError:
        return None
    if document.__class__ is not dict:
        return None
    try:
        return model.model_validate(document)
    except ValidationError:
        return None


def _declares_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bool(value == b"application/json" or value.startswith(b"application/json;"))
    return False


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body already read, then defers to the connection's."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replay


def api_error_response(error: APIError) -> JSONResponse:
    """An APIError as the app answers it: its OpenAI-shaped body, status and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
