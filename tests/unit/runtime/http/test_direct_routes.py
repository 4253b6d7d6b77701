"""Direct routes answer exactly as the same routes do through FastAPI's router."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, field_validator
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp

from runtime.http.errors import install_error_handlers
from runtime.transports.asgi import BackgroundLoop, ThreadedASGITransport
from runtime.http.direct_routes import DirectRoutes, direct_routes, direct_with_body, read_body
from contract.errors import InvalidRequestError, UpstreamError
from runtime.observability.metrics import route_template
from runtime.http.middleware import RequestGuard
from runtime.http.routing import Routes, fastapi_router

SEEN: list[dict[str, Any]] = []


class Thing(BaseModel):
    model: str
    temperature: float = 1.0

    @field_validator("model")
    @classmethod
    def known(cls, value: str) -> str:
        if value == "refused":  # an APIError from validation, as some of the stack's models raise
            raise InvalidRequestError("That model is refused.", param="model", code="refused")
        return value


def build_app(direct_on: bool, refuse_slashes: bool = False) -> ASGIApp:
    """The same routes, with the marked endpoints dispatched directly or (off) by the router; with
    `refuse_slashes`, the app's route table given, as runtime.app.stack_app gives it."""
    routes = Routes()

    def endpoint(name: str) -> Any:
        async def handle(request: Request) -> Response:
            SEEN.append({"name": name, "route": route_template(request.scope)})
            body = await request.body()
            if body == b"fail":
                raise UpstreamError("rate limited upstream", status_code=429, error_type="rate_limit_error", headers={"retry-after": "3"})
            return Response(b'{"echo":' + body + b"}", media_type="application/json", headers={"x-kind": name})
        return handle

    routes.post("/things")(endpoint("direct"))
    routes.get("/things")(endpoint("list"))
    routes.post("/things/{thing_id}")(endpoint("with-parameter"))

    async def create_model(body: Thing, request: Request) -> Response:
        SEEN.append({"name": "model", "route": route_template(request.scope), "routed": "fastapi_middleware_astack" in request.scope})
        if body.model == "fail":
            raise UpstreamError("rate limited upstream", status_code=429, error_type="rate_limit_error")
        return Response(json.dumps({"model": body.model, "temperature": body.temperature}), media_type="application/json")

    routes.post("/models")(direct_with_body(Thing)(create_model))

    async def parts(thing_id: str, request: Request, after: str | None = None, limit: int = 20, flag: bool = False) -> Response:
        SEEN.append({"name": "parts", "route": route_template(request.scope), "routed": "fastapi_middleware_astack" in request.scope})
        return Response(json.dumps({"thing": thing_id, "after": after, "limit": limit, "flag": flag}), media_type="application/json")

    async def special(request: Request) -> Response:
        return Response(b'{"special":true}', media_type="application/json")

    async def named(name: str, request: Request, flag: bool = False) -> Response:
        SEEN.append({"name": "named", "route": route_template(request.scope), "routed": "fastapi_middleware_astack" in request.scope})
        return Response(json.dumps({"name": name, "flag": flag}), media_type="application/json")

    routes.get("/named/{name:path}")(named)
    routes.get("/things/{thing_id}/parts")(parts)
    routes.get("/things/special/parts")(special)  # registered after: the template takes its path too, in both apps
    app = FastAPI()
    app.include_router(fastapi_router(routes), prefix="/v1")
    install_error_handlers(app)
    table = [(compile_path("/v1" + route.path)[0], set(route.methods)) for route in routes.routes] if refuse_slashes else None
    return RequestGuard(DirectRoutes(app, routes=direct_routes([(routes, "/v1")]), all_routes=table) if direct_on else app,
                        max_body_bytes=64)


@pytest.fixture
def clients() -> Iterator[tuple[httpx2.Client, httpx2.Client]]:
    with BackgroundLoop() as loop:
        with (httpx2.Client(transport=ThreadedASGITransport(build_app(True), loop), base_url="http://app") as fast,
              httpx2.Client(transport=ThreadedASGITransport(build_app(False), loop), base_url="http://app") as routed):
            yield fast, routed


def answers(client: httpx2.Client, method: str, path: str, content: bytes = b"") -> tuple[int, bytes, dict[str, str]]:
    reply = client.request(method, path, content=content, headers={"content-type": "application/json"} if content else None)
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


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(("content", "headers"), [
    (b'{"model": "m", "temperature": 0.5}', JSON),
    (b'{"model": "m", "extra": 1}', {"content-type": "application/json; charset=utf-8"}),
    (b'{"model": "fail"}', JSON),  # the endpoint's APIError
    (b'{"model": "refused"}', JSON),  # a validator's APIError
    (b'{"model": 3}', JSON),
    (b'{"temperature": 1}', JSON),
    (b'{"model": "m", "temperature": "hot"}', JSON),
    (b'[1, 2]', JSON),
    (b'"m"', JSON),
    (b"", JSON),
    (b'{"model": "m"}', {}),
    (b'{"model": "m"}', {"content-type": "text/plain"}),
    (b'{"model": "m"}', {"content-type": "application/vnd.thing+json"}),
    (b'{"model": "m", "temperature": NaN}', JSON),
])
def test_a_direct_route_with_a_body_answers_as_the_router_does(clients: tuple[httpx2.Client, httpx2.Client], content: bytes,
                                                               headers: dict[str, str]) -> None:
    fast, routed = clients
    replies = [client.post("/v1/models", content=content, headers=headers) for client in (fast, routed)]
    assert (replies[0].status_code, replies[0].content) == (replies[1].status_code, replies[1].content)


@pytest.mark.parametrize("content", [b'{"model": ', b'{"model": "\xff"}', b'{"model": "\\ud800"}'])
def test_a_body_that_is_not_json_text_is_the_stacks_invalid_json_400(clients: tuple[httpx2.Client, httpx2.Client],
                                                                       content: bytes) -> None:
    # Not left to FastAPI, whose parser takes a lone surrogate (no text: nothing can encode it).
    fast, _ = clients
    reply = fast.post("/v1/models", content=content, headers=JSON)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json" and reply.json()["error"]["param"] is None


@pytest.mark.parametrize("target", [
    "/v1/things/t1/parts", "/v1/things/t1/parts?limit=5&after=a1&flag=true", "/v1/things/t1/parts?limit=abc",
    "/v1/things/t1/parts?limit=", "/v1/things/t1/parts?limit=1&limit=2", "/v1/things/t1/parts?limit=-3",
    "/v1/things/t1/parts?limit=007", "/v1/things/t1/parts?limit=%2B5", "/v1/things/t1/parts?flag=1",
    "/v1/things/t1/parts?flag=yes", "/v1/things/t1/parts?flag=False", "/v1/things/t1/parts?after=&unknown=1",
    "/v1/things/t%201/parts", "/v1/things/special/parts", "/v1/things//parts", "/v1/things/t1/parts/",
])
def test_a_templated_direct_route_answers_as_the_router_does(clients: tuple[httpx2.Client, httpx2.Client], target: str) -> None:
    fast, routed = clients
    replies = [client.get(target) for client in (fast, routed)]
    assert (replies[0].status_code, replies[0].content) == (replies[1].status_code, replies[1].content)


@pytest.mark.parametrize("target", [
    "/v1/named/a", "/v1/named/org/model-1.5", "/v1/named/", "/v1/named", "/v1/named//x", "/v1/named/a%2Fb", "/v1/named/a?flag=true",
    "/v1/named/a?flag=maybe", "/v1/named/a/",
])
def test_a_route_ending_in_the_rest_of_its_path_answers_as_the_router_does(clients: tuple[httpx2.Client, httpx2.Client],
                                                                            target: str) -> None:
    fast, routed = clients
    replies = [client.get(target) for client in (fast, routed)]
    assert (replies[0].status_code, replies[0].content) == (replies[1].status_code, replies[1].content)


def test_a_route_ending_in_the_rest_of_its_path_goes_direct(clients: tuple[httpx2.Client, httpx2.Client]) -> None:
    fast, _ = clients
    SEEN.clear()
    assert fast.get("/v1/named/org/model").json() == {"name": "org/model", "flag": False}
    assert SEEN == [{"name": "named", "route": "/v1/named/{name:path}", "routed": False}]


def test_a_templated_route_goes_direct_in_the_common_case(clients: tuple[httpx2.Client, httpx2.Client]) -> None:
    fast, _ = clients
    SEEN.clear()
    fast.get("/v1/things/t1/parts?limit=5&flag=true&include[]=x")
    fast.get("/v1/things/t1/parts?limit=5&limit=6")
    assert [(entry["route"], entry["routed"]) for entry in SEEN] == [("/v1/things/{thing_id}/parts", False),
                                                                     ("/v1/things/{thing_id}/parts", True)]


def test_a_direct_route_names_its_route_template_as_the_router_would(clients: tuple[httpx2.Client, httpx2.Client]) -> None:
    fast, routed = clients
    SEEN.clear()
    fast.post("/v1/things", content=b"1", headers=JSON)
    routed.post("/v1/things", content=b"1", headers=JSON)
    assert SEEN == [{"name": "direct", "route": "/v1/things"}] * 2


def test_a_body_goes_direct_only_in_the_common_case(clients: tuple[httpx2.Client, httpx2.Client]) -> None:
    fast, routed = clients
    SEEN.clear()
    fast.post("/v1/models", content=b'{"model": "m"}', headers=JSON)
    fast.post("/v1/models", content=b'{"model": "m"}', headers={"content-type": "application/vnd.thing+json"})
    routed.post("/v1/models", content=b'{"model": "m"}', headers=JSON)
    assert [entry["routed"] for entry in SEEN] == [False, True, True]
    assert {entry["route"] for entry in SEEN} == {"/v1/models"}


@pytest.mark.parametrize(("method", "path", "hint"), [
    ("POST", "/v1/things/", "did you mean POST /v1/things? No route ends in a slash."),  # the router: a 307 to /v1/things
    ("GET", "/v1/things/t1/parts/", "did you mean GET /v1/things/t1/parts? No route ends in a slash."),  # templated
    ("GET", "/v1/named/", "no route ends in a slash"),  # a rest of the path: an empty name
    ("GET", "/v1/named/a/", "did you mean GET /v1/named/a? No route ends in a slash."),  # the name "a/"
    ("DELETE", "/v1/things/", "no route ends in a slash"),  # no DELETE there without the slash either
    ("GET", "/v1/nothing/", "no route ends in a slash"),
])
def test_with_the_apps_routes_a_path_ending_in_a_slash_is_an_unknown_route(method: str, path: str, hint: str) -> None:
    with BackgroundLoop() as loop, httpx2.Client(transport=ThreadedASGITransport(build_app(True, refuse_slashes=True), loop),
                                                 base_url="http://app") as client:
        SEEN.clear()
        reply = client.request(method, path, content=b"[1]", headers=JSON)
        assert reply.status_code == 404 and reply.json() == {"error": {
            "message": f"Unknown route: {method} {path} ({hint})", "type": "invalid_request_error", "param": None, "code": None}}
        assert SEEN == []  # no endpoint ran
        assert client.post("/v1/things", content=b"[1]", headers=JSON).json() == {"echo": [1]}  # the route itself as ever
        assert client.get("/", headers=JSON).status_code == 404  # "/" is a path, not a slash after one


def test_templated_routes_are_direct_unless_an_earlier_route_could_take_the_path() -> None:
    def endpoint() -> Any:
        async def handle(request: Request) -> Response:
            return Response()
        return handle

    def with_id() -> Any:
        async def handle(b_id: str) -> Response:
            return Response()
        return handle

    async def serialised(request: Request) -> dict[str, str]:  # FastAPI serialises what it returns
        return {}

    routes = Routes()
    routes.post("/a")(endpoint())
    routes.get("/a")(serialised)
    routes.get("/b/{b_id}")(with_id())
    routes.get("/c/fixed")(serialised)
    routes.get("/c/{b_id}")(with_id())  # /c/fixed, declared first, is FastAPI's to answer
    routes.get("/d/{rest:path}")(endpoint())
    routes.get("/d/{b_id}")(with_id())  # the converter before it may take any /d/... path
    table = direct_routes([(routes, "/v1")])
    assert set(table.exact) == {("POST", "/v1/a")}
    assert {(key, call.route.path) for key, calls in table.templated.items() for call in calls} == {(("GET", 4), "/b/{b_id}")}


def test_a_rest_of_path_route_is_direct_unless_an_earlier_route_could_take_one_of_its_paths() -> None:
    async def rest(name: str) -> Response:
        return Response()

    async def one(b_id: str) -> Response:
        return Response()

    routes = Routes()
    routes.get("/e/{name:path}")(rest)
    routes.get("/f/x/y")(one)
    routes.get("/f/{name:path}")(rest)  # /f/x/y, declared first, is FastAPI's to answer
    routes.get("/g/{b_id}")(one)
    routes.get("/g/{name:path}")(rest)
    routes.get("/h")(one)
    routes.get("/h/{name:path}")(rest)  # /h itself is not one of its paths
    routes.get("/e/{b_id}")(one)  # the rest route before it may take any /e/... path
    table = direct_routes([(routes, "/v1")])
    assert {(method, call.route.path) for method, calls in table.rests.items() for call in calls} == {("GET", "/e/{name:path}"),
                                                                                                     ("GET", "/h/{name:path}")}
    assert {call.route.path for calls in table.templated.values() for call in calls} == {"/g/{b_id}"}


def test_an_endpoint_that_needs_fastapi_to_read_its_parameters_is_left_to_fastapi() -> None:
    async def listed(after: float = 0.0) -> Response:
        return Response()

    async def required(after: str) -> Response:
        return Response()

    async def reads_a_body(body: Thing) -> Response:
        return Response()

    routes = Routes()
    for path, endpoint in (("/a", listed), ("/b", required), ("/c", reads_a_body)):
        routes.get(path)(endpoint)
    table = direct_routes([(routes, "/v1")])
    assert not table.exact and not table.templated


def test_an_endpoint_marked_with_a_body_that_cannot_be_called_directly_is_refused_when_the_table_is_built() -> None:
    async def listed(body: Thing, after: float = 0.0) -> Response:
        return Response()

    async def serialised(body: Thing) -> dict[str, str]:
        return {}

    routes = Routes()
    routes.post("/a")(direct_with_body(Thing)(listed))
    with pytest.raises(ValueError, match="query parameter 'after'"):
        direct_routes([(routes, "/v1")])
    routes = Routes()
    routes.post("/a")(direct_with_body(Thing)(serialised))
    with pytest.raises(ValueError, match="returns a Response"):
        direct_routes([(routes, "/v1")])


async def test_read_body_reads_what_starlette_would_and_leaves_it_for_later_reads() -> None:
    def receiving(*messages: dict[str, Any]) -> Any:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        return receive

    parts = ({"type": "http.request", "body": b'{"a":', "more_body": True}, {"type": "http.request", "body": b"", "more_body": True},
             {"type": "http.request", "body": b"1}", "more_body": False})
    scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
    ours, theirs = Request(scope, receiving(*parts)), Request(scope, receiving(*parts))
    assert await read_body(ours) == await theirs.body() == b'{"a":1}'
    assert await ours.body() == b'{"a":1}' and await ours.json() == {"a": 1}
    assert [chunk async for chunk in ours.stream()] == [b'{"a":1}', b""]  # from what was kept: receive is not called again
    with pytest.raises(ClientDisconnect):
        await read_body(Request(scope, receiving(parts[0], {"type": "http.disconnect"})))
