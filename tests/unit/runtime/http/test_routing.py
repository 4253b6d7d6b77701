"""Routes declared on `Routes` become the same FastAPI routes APIRouter's decorators would make."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from runtime.http.routing import Routes, fastapi_router


async def listed(request: Request, after: str | None = None) -> Response:
    return Response()


async def changed(thing_id: str) -> Response:
    return Response()


async def socket(websocket: WebSocket) -> None:
    await websocket.close()


def declare(routes: Routes | APIRouter) -> None:
    routes.get("/things", summary="List things")(listed)
    routes.post("/things/{thing_id}", summary="Change a thing", openapi_extra={"x-kind": 1}, tags=["extra"])(changed)
    routes.put("/things/{thing_id}")(changed)
    routes.delete("/things/{thing_id}", include_in_schema=False)(changed)
    routes.websocket("/things/live")(socket)


def described(router: APIRouter) -> list[tuple[str, str, object]]:
    described: list[tuple[str, str, object]] = []
    for route in router.routes:
        if isinstance(route, APIRoute):
            described.append((route.path, ",".join(sorted(route.methods)), (route.summary, route.tags, route.openapi_extra,
                                                                            route.include_in_schema, route.endpoint)))
        else:
            assert isinstance(route, APIWebSocketRoute)
            described.append((route.path, "websocket", route.endpoint))
    return described


def test_the_fastapi_router_has_the_routes_apirouter_would_have() -> None:
    ours, theirs = Routes(prefix="/v1", tags=["things"]), APIRouter(prefix="/v1", tags=["things"])
    declare(ours)
    declare(theirs)
    assert described(fastapi_router(ours)) == described(theirs)
    assert [route.path for route in ours.routes] == ["/v1/things", "/v1/things/{thing_id}", "/v1/things/{thing_id}",
                                                     "/v1/things/{thing_id}", "/v1/things/live"]


def test_the_openapi_document_is_the_one_apirouter_gives() -> None:
    ours, theirs = Routes(tags=["things"]), APIRouter(tags=["things"])
    declare(ours)
    declare(theirs)
    documents = []
    for router in (fastapi_router(ours), theirs):
        app = FastAPI()
        app.include_router(router, prefix="/v1")
        documents.append(app.openapi())
    assert documents[0] == documents[1]
    assert set(documents[0]["paths"]) == {"/v1/things", "/v1/things/{thing_id}"}
