"""Routes declared without importing FastAPI.

Each API's `routes.py` declares its endpoints on a `Routes` with the decorators FastAPI's
`APIRouter` has (`get`, `post`, `put`, `delete`, `websocket`), taking the same keyword arguments
(`summary`, `openapi_extra`, `include_in_schema`...), which are kept as they are. The app calls the
direct endpoints itself (runtime.http.direct_routes) and hands every other request to a FastAPI app made
from the same declarations (`fastapi_router`), built the first time a request needs it: importing
FastAPI and building its routes is about a third of the server's start-up and 8 MiB of its memory
(bench/README), and a server whose clients call only the direct routes never pays it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["Route", "Routes", "fastapi_router"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, eq=False)
class Route:
    """One declared endpoint. `path` includes the prefix of its `Routes` (not the one it is later
    mounted under), as FastAPI's `APIRoute.path` does; metrics, logs and traces read it."""

    path: str
    methods: frozenset[str]  # empty for a WebSocket route
    endpoint: Callable[..., Any]
    options: dict[str, Any] = field(default_factory=dict)
    websocket: bool = False


class Routes:
    """A group of routes, declared as on FastAPI's `APIRouter` (same decorators, same arguments)."""

    def __init__(self, prefix: str = "", tags: list[str] | None = None) -> None:
        self.prefix = prefix
        self.tags = list(tags or ())
        self.routes: list[Route] = []

    def route(self, path: str, methods: list[str], **options: Any) -> Callable[[F], F]:
        return self._declare(path, frozenset(method.upper() for method in methods), options, websocket=False)

    def get(self, path: str, **options: Any) -> Callable[[F], F]:
        return self.route(path, ["GET"], **options)

    def post(self, path: str, **options: Any) -> Callable[[F], F]:
        return self.route(path, ["POST"], **options)

    def put(self, path: str, **options: Any) -> Callable[[F], F]:
        return self.route(path, ["PUT"], **options)

    def delete(self, path: str, **options: Any) -> Callable[[F], F]:
        return self.route(path, ["DELETE"], **options)

    def websocket(self, path: str, **options: Any) -> Callable[[F], F]:
        return self._declare(path, frozenset(), options, websocket=True)

    def _declare(self, path: str, methods: frozenset[str], options: dict[str, Any], websocket: bool) -> Callable[[F], F]:
        def declare(endpoint: F) -> F:
            self.routes.append(Route(self.prefix + path, methods, endpoint, options, websocket))
            return endpoint

        return declare


def fastapi_router(routes: Routes) -> APIRouter:
    """The same routes on a FastAPI `APIRouter`, in the order they were declared."""
    from fastapi import APIRouter

    router = APIRouter(tags=list(routes.tags))
    for route in routes.routes:
        if route.websocket:
            router.add_api_websocket_route(route.path, route.endpoint, **route.options)
        else:
            router.add_api_route(route.path, route.endpoint, methods=sorted(route.methods), **route.options)
    return router
