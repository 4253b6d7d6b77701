"""Direct routes answer exactly as the same routes do through FastAPI's router."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from runtime.app import install_error_handlers
from runtime.asgi_transport import BackgroundLoop, ThreadedASGITransport
from runtime.direct_routes import DirectRoutes, direct, direct_routes
from runtime.errors import UpstreamError
from runtime.metrics import route_template
from runtime.middleware import RequestGuard

SEEN: list[dict[str, Any]] = []


def build_app(direct_on: bool) -> FastAPI:
    """The same routes, with the marked endpoints dispatched directly or (off) by the router."""
    routes = APIRouter()

    def endpoint(name: str) -> Any:
        async def handle(request: Request) -> Response:
            SEEN.append({"name": name, "route": route_template(request.scope)})
            body = await request.body()
            if body == b"fail":
                raise UpstreamError("rate limited upstream", status_code=429, error_type="rate_limit_error", headers={"retry-after": "3"})
            return Response(b'{"echo":' + body + b"}", media_type="application/json", headers={"x-kind": name})
        return handle

    routes.post("/things")(direct(endpoint("direct")))
    routes.get("/things")(endpoint("list"))
    routes.post("/things/{thing_id}")(direct(endpoint("with-parameter")))
    app = FastAPI()
    app.include_router(routes, prefix="/v1")
    install_error_handlers(app)
    if direct_on:
        app.add_middleware(DirectRoutes, routes=direct_routes([(routes, "/v1")]))
    app.add_middleware(RequestGuard, max_body_bytes=64)
    return app


@pytest.fixture
def clients() -> Iterator[tuple[httpx2.Client, httpx2.Client]]:
    with BackgroundLoop() as loop:
        with (httpx2.Client(transport=ThreadedASGITransport(build_app(True), loop), base_url="http://app") as fast,
              httpx2.Client(transport=ThreadedASGITransport(build_app(False), loop), base_url="http://app") as routed):
            yield fast, routed


def answers(client: httpx2.Client, method: str, path: str, content: bytes = b"") -> tuple[int, bytes, dict[str, str]]:
    reply = client.request(method, path, content=content)
    headers = {name: value for name, value in reply.headers.items() if name not in ("x-request-id", "date")}
    return reply.status_code, reply.content, headers


@pytest.mark.parametrize(("method", "path", "content"), [
    ("POST", "/v1/things", b"[1,2]"),
    ("POST", "/v1/things", b"fail"),  # an APIError: its status, body and headers
    ("POST", "/v1/things", b"x" * 100),  # over the guard's limit while the body is read
    ("GET", "/v1/things", b""),  # another method at the same path: the router
    ("DELETE", "/v1/things", b""),  # no such method: the router's 405
    ("POST", "/v1/things/", b"[3]"),  # a path that is not exactly the route's
    ("POST", "/v1/things/t1", b"[4]"),  # a path with parameters: the router
])
def test_a_direct_route_answers_as_the_router_does(clients: tuple[httpx2.Client, httpx2.Client], method: str, path: str,
                                                   content: bytes) -> None:
    fast, routed = clients
    assert answers(fast, method, path, content) == answers(routed, method, path, content)


def test_a_direct_route_names_its_route_template_as_the_router_would(clients: tuple[httpx2.Client, httpx2.Client]) -> None:
    fast, routed = clients
    SEEN.clear()
    fast.post("/v1/things", content=b"1")
    routed.post("/v1/things", content=b"1")
    assert SEEN == [{"name": "direct", "route": "/v1/things"}] * 2


def test_only_marked_endpoints_at_paths_without_parameters_are_direct() -> None:
    routes = APIRouter()
    routes.post("/a")(direct(lambda request: None))  # type: ignore[arg-type]
    routes.get("/a")(lambda: None)
    routes.post("/b/{b_id}")(direct(lambda request: None))  # type: ignore[arg-type]
    assert set(direct_routes([(routes, "/v1")])) == {("POST", "/v1/a")}
