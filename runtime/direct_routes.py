"""Direct routes: the hottest endpoints called without FastAPI's routing layers.

Between the stack's own middleware and an endpoint, FastAPI runs an exception middleware, an exit
stack, the router's matching over every route, the route's request/response wrappers and its
dependency solver: about a fifth of a proxied chat request's CPU (py-spy, c=32; bench/README).
An endpoint marked `direct` that takes only the `Request` is called straight from `DirectRoutes`,
the innermost of the stack's middleware, when the method and path are exactly its own. Everything
else about the route stays as it was: it is still registered with FastAPI (the OpenAPI document,
405s, trailing slashes and every other path go through the router), the stack's middleware (request
ids, limits, auth, metrics, logs, traces) runs as before, and an `APIError` it raises is answered
as the app's handler answers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from runtime.errors import APIError

__all__ = ["DirectRoutes", "direct", "direct_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]
E = TypeVar("E", bound=Endpoint)

_MARK = "__stack_direct__"


def direct(endpoint: E) -> E:
    """Mark a route's endpoint to be called without FastAPI's routing layers. It must take the
    `Request` alone (no parameters for FastAPI to parse, no dependencies) and return a Response."""
    setattr(endpoint, _MARK, True)
    return endpoint


def direct_routes(routers: Iterable[tuple[APIRouter, str]]) -> dict[tuple[str, str], tuple[Endpoint, APIRoute]]:
    """(method, path) -> (endpoint, route) for every marked endpoint, at a path without parameters,
    of the (router, prefix it is included under) given."""
    table: dict[tuple[str, str], tuple[Endpoint, APIRoute]] = {}
    for router, prefix in routers:
        for route in router.routes:
            if isinstance(route, APIRoute) and getattr(route.endpoint, _MARK, False) and "{" not in route.path:
                for method in route.methods or ():
                    table[(method, prefix + route.path)] = (route.endpoint, route)
    return table


class DirectRoutes:
    """ASGI middleware: a request for a direct route goes to its endpoint; any other to `app`."""

    def __init__(self, app: ASGIApp, routes: dict[tuple[str, str], tuple[Endpoint, APIRoute]]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self.routes.get((scope["method"], scope["path"])) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        endpoint, route = target
        scope["route"] = route  # what the router would have set: metrics, logs and traces name it
        try:
            response = await endpoint(Request(scope, receive, send))
        except APIError as error:
            response = api_error_response(error)
        await response(scope, receive, send)


def api_error_response(error: APIError) -> JSONResponse:
    """An APIError as the app answers it: its OpenAI-shaped body, status and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
