"""Direct routes: endpoints called without FastAPI.

Between the stack's own middleware and an endpoint, FastAPI runs an exception middleware, an exit
stack, the router's matching over every route, the route's request/response wrappers and its
dependency solver: about a fifth of a proxied chat request's CPU, and twice a conversation's items
list's own work (py-spy; bench/README); importing FastAPI and building its routes is a third of the
server's start-up. So every endpoint that needs nothing parsed that FastAPI would parse (it takes the
`Request`, path parameters of type `str` (whole segments, or the rest of the path after fixed ones)
and query parameters of type `str`, `int` or `bool` with defaults, and returns a Response), and every
endpoint marked `direct_with_body(Model)` (its body, parsed as `Model`, and the `Request`), is called
straight from `DirectRoutes`, the innermost of the stack's middleware, when the method and path are
its own.

What FastAPI would parse is read here only in the common case: a body declared JSON that parses
and validates, a query value given once in its plain form. Any other request goes on to FastAPI as
it came (a body already read is replayed), so every mistake is answered exactly as FastAPI answers
it. A templated path is left to FastAPI when a route declared before it could take the same
path. Everything else about the route stays as it was: FastAPI has it too (the OpenAPI document,
405s and every other path go through its router), the stack's middleware (request ids, limits, auth,
metrics, logs, traces) runs as before, and an `APIError` it raises is answered as the app's handler
answers it.

Given the app's whole route table (`all_routes`), `DirectRoutes` also refuses a path that ends in a
slash, as an unknown route, before any route or router sees it: no route of the stack ends in one,
and OpenAI answers such a path 404. Left to them, Starlette's router redirected it (307) to the path
without the slash, and a route ending in `{name:path}` took it with the slash in its parameter, or
an empty one (`GET /v1/models/` a 400 for a missing model).
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract import fastjson
from contract.errors import JSON_INVALID_MESSAGE, APIError, InvalidRequestError, NotFoundError
from runtime.http.routing import Route, Routes

__all__ = ["DirectRoutes", "RouteTable", "direct_routes", "direct_with_body", "read_body", "replay_body", "unknown_route"]

RouteTable = Sequence[tuple[re.Pattern[str], set[str]]]
"""Every route of an app: its path's pattern and its methods."""

Endpoint = Callable[..., Awaitable[Response]]
E = TypeVar("E", bound=Endpoint)

_MARK = "__stack_direct_body__"
# Query parameter types read here; a value in any other form goes to FastAPI (which words the error).
_QUERY_KINDS: dict[Any, str] = {str: "str", int: "int", bool: "bool", str | None: "str", int | None: "int", bool | None: "bool"}
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")


def direct_with_body(model: type[BaseModel]) -> Callable[[E], E]:
    """Mark a route's endpoint that takes a JSON body of `model` (and may take the `Request`, path
    and query parameters, as any direct endpoint) to be called without FastAPI."""

    def mark(endpoint: E) -> E:
        setattr(endpoint, _MARK, model)
        return endpoint

    return mark


@dataclass(frozen=True)
class Call:
    """How to call one direct endpoint: what its path must be, and where each argument comes from."""

    endpoint: Endpoint
    route: Route
    body: type[BaseModel] | None
    body_param: str | None
    request_param: str | None
    literals: tuple[tuple[int, str], ...]  # (segment index, text) the path must have
    path_params: tuple[tuple[int, str], ...]  # (segment index, name)
    query: tuple[tuple[str, str], ...]  # (name, kind); absent ones keep the endpoint's defaults
    rest: tuple[str, str] | None = None  # (what the path starts with, name): a last segment `{name:path}`


@dataclass
class Table:
    exact: dict[tuple[str, str], Call] = field(default_factory=dict)
    """By (method, path), for paths without parameters."""
    templated: dict[tuple[str, int], list[Call]] = field(default_factory=dict)
    """By (method, number of path segments), in the order FastAPI would try them."""
    rests: dict[str, list[Call]] = field(default_factory=dict)
    """By method, for paths ending in `{name:path}` (the rest of the path, slashes and all)."""


def direct_routes(routers: Iterable[tuple[Routes, str]]) -> Table:
    """The direct endpoints of the (routes, prefix they are mounted under) given, in mount order.
    A templated path is left to FastAPI when a route declared before it could take the same path
    (FastAPI would call that one)."""
    table = Table()
    seen: list[tuple[str, str]] = []  # (method, full path) of every route so far, direct or not
    for routes, prefix in routers:
        for route in routes.routes:
            if route.websocket:
                continue
            path = prefix + route.path
            body: type[BaseModel] | None = getattr(route.endpoint, _MARK, None)
            call = _call(route, path, body) if body is not None else _plain_call(route, path)
            for method in sorted(route.methods):
                if call is not None and not any(m == method and _may_overlap(earlier, path) for m, earlier in seen):
                    if call.rest is not None:
                        table.rests.setdefault(method, []).append(call)
                    elif call.path_params:
                        table.templated.setdefault((method, path.count("/") + 1), []).append(call)
                    else:
                        table.exact[(method, path)] = call
                seen.append((method, path))
    return table


def _plain_call(route: Route, path: str) -> Call | None:
    """How to call an endpoint with no body model, or None if it needs FastAPI: it takes a
    parameter FastAPI must parse (a header, a form field, a dependency, a float...), its path has a
    converter, or it returns something other than a Response (which FastAPI serialises)."""
    try:
        return _call(route, path, None)
    except ValueError:
        return None


def _call(route: Route, path: str, body: type[BaseModel] | None) -> Call:
    """How to call `route`'s endpoint, read from its signature as FastAPI reads the parameters a
    direct endpoint may take: the `Request`, path parameters, plain query parameters and (when
    marked with one) the body's model, and it returns a Response; ValueError for anything else (at
    start-up)."""
    segments = path.split("/")
    last = segments[-1]
    rest = last[1:-len(":path}")] if last.startswith("{") and last.endswith(":path}") else None
    fixed = segments[:-1] if rest is not None else segments
    in_path = {segment[1:-1] for segment in fixed if segment.startswith("{") and segment.endswith("}")}
    if any(":" in segment for segment in fixed) or (rest is not None and in_path):
        raise ValueError(f"{path}: a direct endpoint's path parameters are whole segments of type str, or one rest of the path after fixed ones")
    hints = typing.get_type_hints(route.endpoint)
    returns = hints.get("return")
    if not (isinstance(returns, type) and issubclass(returns, Response)):
        raise ValueError(f"{path}: a direct endpoint returns a Response (FastAPI serialises anything else)")
    request_param = body_param = None
    path_names: set[str] = set()
    query = []
    for param in inspect.signature(route.endpoint).parameters.values():
        annotation = hints.get(param.name, Any)
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ValueError(f"{path}: a direct endpoint takes named parameters only")
        if isinstance(annotation, type) and issubclass(annotation, Request):
            request_param = param.name
        elif param.name in in_path or param.name == rest:
            if annotation is not str:
                raise ValueError(f"{path}: a direct endpoint's path parameters are of type str")
            path_names.add(param.name)
        elif body is not None and annotation is body and body_param is None:
            body_param = param.name
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            raise ValueError(f"{path}: a direct endpoint takes no body unless marked with its model")
        else:
            kind = _QUERY_KINDS.get(annotation)
            if kind is None or param.default is param.empty or isinstance(param.default, FieldInfo):
                raise ValueError(f"{path}: query parameter {param.name!r} cannot be read directly (str, int or bool, with a default)")
            query.append((param.name, kind))
    if body is not None and body_param is None:
        raise ValueError(f"{path}: a direct endpoint marked with a body takes it as a parameter of type {body.__name__}")
    if rest is not None and rest not in path_names:
        raise ValueError(f"{path}: a direct endpoint takes the rest of its path")
    # A template segment the endpoint does not take stays literal: only a request for the template's
    # own text would match it, so FastAPI answers the route (as it did when FastAPI read the signature).
    path_params = tuple((index, segment[1:-1]) for index, segment in enumerate(fixed) if segment[1:-1] in path_names)
    at_params = {index for index, _ in path_params}
    literals = tuple((index, segment) for index, segment in enumerate(fixed) if index not in at_params)
    return Call(route.endpoint, route, body, body_param, request_param, literals, path_params, tuple(query),
                ("/".join(fixed) + "/", rest) if rest is not None else None)


def _may_overlap(earlier: str, later: str) -> bool:
    """Whether some request path could match both templates. A converter, such as `{x:path}`, may
    match any rest of the path (an empty one too) from its segment on."""
    a, b = earlier.split("/"), later.split("/")
    at_a, at_b = _converter_at(a), _converter_at(b)
    if at_a is None and at_b is None:
        return len(a) == len(b) and _compatible(a, b)
    return any(at is not None and len(other) > at and _compatible(a[:at], b[:at]) for at, other in ((at_a, b), (at_b, a)))


def _converter_at(segments: list[str]) -> int | None:
    return next((index for index, segment in enumerate(segments) if ":" in segment), None)


def _compatible(a: list[str], b: list[str]) -> bool:
    """Segment by segment, equal or a parameter on either side."""
    return all(x == y or x.startswith("{") or y.startswith("{") for x, y in zip(a, b))


class DirectRoutes:
    """ASGI middleware: a request for a direct route goes to its endpoint; any other to `app`. With
    `all_routes`, a path ending in a slash is an unknown route (the module's docstring)."""

    def __init__(self, app: ASGIApp, routes: Table, all_routes: RouteTable | None = None) -> None:
        self.app = app
        self.exact = routes.exact
        self.templated = routes.templated
        self.rests = routes.rests
        self.all_routes = all_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        call = self.exact.get((scope["method"], path))
        arguments: dict[str, Any] = {}
        if call is None:
            if self.all_routes is not None and path.endswith("/") and path != "/":
                await api_error_response(self._slash_ended(scope["method"], path))(scope, receive, send)
                return
            if self.templated:
                call = _match(self.templated.get((scope["method"], path.count("/") + 1)), path, arguments)
            if call is None and self.rests:
                call = _match_rest(self.rests.get(scope["method"]), path, arguments)
            if call is None:
                await self.app(scope, receive, send)
                return
        if call.query and scope["query_string"] and not _read_query(call.query, scope["query_string"], arguments):
            await self.app(scope, receive, send)  # not the common case: FastAPI reads it, and words any mistake
            return
        scope["route"] = call.route  # what the router would have set: metrics, logs and traces name it
        request = Request(scope, receive, send)
        if call.request_param is not None:
            arguments[call.request_param] = request
        try:
            if call.body is not None:
                raw = await read_body(request)
                body = _parsed(call.body, scope, raw)
                if body is None:  # not the common case: FastAPI parses it, and words any mistake
                    await self.app(scope, replay_body(raw, receive), send)
                    return
                arguments[call.body_param or ""] = body
            response = await call.endpoint(**arguments)
        except APIError as error:
            response = api_error_response(error)
        try:
            await response(scope, receive, send)
        except APIError as error:  # raised before the response started (runtime.http.sse: the head of a stream)
            await api_error_response(error)(scope, receive, send)

    def _slash_ended(self, method: str, path: str) -> NotFoundError:
        bare = path.rstrip("/")
        served = any(method in methods and pattern.match(bare) for pattern, methods in self.all_routes or ())
        hint = f"did you mean {method} {bare}? No route ends in a slash." if served else "no route ends in a slash"
        return NotFoundError(f"{unknown_route(method, path)} ({hint})")


def unknown_route(method: str, path: str) -> str:
    """What a 404 for a path no route serves says (OpenAI's is "Invalid URL (GET /v1/x)")."""
    return f"Unknown route: {method} {path}"


async def read_body(request: Request) -> bytes:
    """`await request.body()` without the async generator Starlette reads it through (3.4 µs of a
    request in process, of 4.6): the same messages taken from `receive`, the same `ClientDisconnect`
    if the client leaves, and the body kept where Starlette keeps it (`_body`, which its `body()`,
    `stream()`, `json()` and `form()` read first), so a later read of either kind sees it."""
    body: bytes | None = getattr(request, "_body", None)
    if body is not None:
        return body
    chunks: list[bytes] = []
    while True:
        message = await request.receive()
        kind = message["type"]
        if kind == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request._body = body
    return body


def _match(calls: list[Call] | None, path: str, arguments: dict[str, Any]) -> Call | None:
    if not calls:
        return None
    segments = path.split("/")
    for call in calls:
        if all(segments[index] == text for index, text in call.literals) and all(segments[index] for index, _ in call.path_params):
            for index, name in call.path_params:
                arguments[name] = segments[index]
            return call
    return None


def _match_rest(calls: list[Call] | None, path: str, arguments: dict[str, Any]) -> Call | None:
    for call in calls or ():
        assert call.rest is not None
        start, name = call.rest
        if path.startswith(start):
            arguments[name] = path[len(start):]
            return call
    return None


def _read_query(query: tuple[tuple[str, str], ...], raw: bytes, arguments: dict[str, Any]) -> bool:
    """The endpoint's query parameters into `arguments`; False when one is not in its plain form
    (repeated, empty, or not a plain integer or `true`/`false`)."""
    kinds = dict(query)
    for name, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        kind = kinds.get(name)
        if kind is None:
            continue  # FastAPI ignores a parameter the endpoint does not take
        if name in arguments or not value:
            return False
        if kind == "int":
            if not _INTEGER.fullmatch(value):
                return False
            arguments[name] = int(value)
        elif kind == "bool":
            if value not in ("true", "false"):
                return False
            arguments[name] = value == "true"
        else:
            arguments[name] = value
    return True


def _parsed(model: type[BaseModel], scope: Scope, raw: bytes) -> BaseModel | None:
    """The body as `model`, when it is declared JSON, parses to an object and validates; else None."""
    if not raw or not _declares_json(scope):
        return None
    try:
        document: Any = fastjson.loads(raw)
    except ValueError:
        # Answered here, not by FastAPI: the standard library's parser takes lone surrogates
        # ("\ud800"), which no store and no model can encode, and every other route refuses.
        raise InvalidRequestError(JSON_INVALID_MESSAGE, code="invalid_json") from None
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


def replay_body(raw: bytes, receive: Receive) -> Receive:
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
