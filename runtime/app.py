"""The FastAPI app over a started stack: the routes of the served APIs plus the system routes."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import compile_path

from builder.config import AuthConfig
from providers.spec import Api
from runtime.apis import SURFACES
from runtime.apis.unavailable import NoModels, Unavailable, unavailable_message
from runtime.auth import OPEN_PATHS, AuthGuard, Authenticator
from runtime.metrics import CONTENT_TYPE, Metrics
from runtime.tracing import Tracing
from runtime.quotas import Quotas
from runtime.errors import APIError, error_body, validation_error_body
from runtime.forms import FormFields
from runtime.direct_routes import DirectRoutes, api_error_response, direct_routes
from runtime.middleware import Draining, RequestGuard
from runtime.stack import Stack
from runtime.system_routes import stack_version, system_router

if TYPE_CHECKING:
    from runtime.access import AccessPolicy
    from runtime.keys import DatabaseKeys

__all__ = ["create_app", "install_error_handlers"]

log = logging.getLogger("stack")


def create_app(stack: Stack) -> FastAPI:
    """The ASGI app the server and the library client both run."""
    app = FastAPI(
        title=f"stack: {stack.plan.config.name}",
        version=stack_version(),
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        # The stack traces and counts requests itself (server.tracing, server.metrics). FastAPI's
        # own OpenTelemetry would add a second set of spans wherever a global provider is set, and
        # checks the global providers on every request to know whether one is.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    routers: list[tuple[APIRouter, str, list[str]]] = [(system_router(stack, app), "", [])]
    for api in stack.plan.served_apis:
        surface = SURFACES.get(api)
        if surface is not None and surface.router is not None:
            uses = {used.value: stack.impls.get(used) for used in surface.uses}
            routers.append((surface.router(stack.impls[api], **uses), "/v1", [api.value]))
    for api, inactive in stack.plan.unavailable_apis().items():
        surface = SURFACES.get(api)
        if surface is not None and surface.router is not None:
            stand_in = (NoModels if api is Api.inference else Unavailable)(unavailable_message(api, inactive))
            routers.append((surface.router(stand_in, **{used.value: None for used in surface.uses}), "/v1", [api.value]))
    for router, prefix, tags in routers:
        app.include_router(router, prefix=prefix, tags=list(tags))
    app.state.route_methods = [entry for router, prefix, _ in routers for entry in _route_methods(router, prefix)]
    install_error_handlers(app)
    # Innermost of the stack's middleware: the hot endpoints skip only FastAPI's routing layers.
    app.add_middleware(DirectRoutes, routes=direct_routes((router, prefix) for router, prefix, _ in routers))
    server = stack.plan.config.server
    metrics = Metrics() if server.metrics is not None else None
    if metrics is not None and server.metrics is not None:
        _serve_metrics(app, metrics, server.metrics.path)
    if server.auth is not None:  # inside CORS, so a browser can read a 401; off, it costs nothing
        quotas = Quotas(server.auth.quotas) if server.auth.quotas is not None else None
        open_paths = OPEN_PATHS | ({server.metrics.path} if server.metrics is not None and server.metrics.open else set())
        app.add_middleware(AuthGuard, authenticator=Authenticator(server.auth, _database_keys(stack, server.auth)), quotas=quotas,
                           open_paths=open_paths, access=_access_policy(stack, server.auth))
    if server.cors is not None:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=server.cors.allow_origins,
            allow_methods=server.cors.allow_methods,
            allow_headers=server.cors.allow_headers,
            allow_credentials=server.cors.allow_credentials,
            expose_headers=["x-request-id"],
        )
    limits: dict[tuple[str, str], int] = {}
    forms: dict[str, FormFields] = {}
    for api in stack.plan.served_apis:
        surface = SURFACES.get(api)
        if surface is None:
            continue
        if surface.body_limits is not None:
            limits.update(surface.body_limits(stack.impls[api]))
        forms.update(surface.form_bodies)
    app.state.draining = Draining()
    # Outermost, and it counts requests when metrics are on: refusals (401, 413, 429, 503) are counted too.
    app.state.tracing = Tracing(server.tracing) if server.tracing is not None else None
    app.add_middleware(RequestGuard, max_body_bytes=server.max_request_bytes, route_limits=limits, form_paths=forms,
                       draining=app.state.draining,
                       metrics=metrics, tracing=app.state.tracing, log_context=server.logging is not None,
                       access_log=server.logging is not None and server.logging.access_log)
    _document_as_served(app, stack, frozenset(forms))
    return app


def _document_as_served(app: FastAPI, stack: Stack, form_paths: frozenset[str]) -> None:
    """`app.openapi()` (and /openapi.json) amended to the server's behaviour (runtime.openapi),
    built once, on first use."""
    auth = stack.plan.config.server.auth
    metrics = stack.plan.config.server.metrics
    open_paths = OPEN_PATHS | ({metrics.path} if metrics is not None and metrics.open else set())
    built = app.openapi
    document: dict[str, Any] | None = None

    def openapi() -> dict[str, Any]:
        nonlocal document
        if document is None:
            from runtime.apis.files.routes import FILE_LIST_MAX
            from runtime.apis.inference.routes import CHAT_LIST_MAX
            from runtime.openapi import amend

            document = amend(built(), auth=auth is not None, quotas=auth is not None and auth.quotas is not None,
                             open_paths=frozenset(open_paths),
                             list_limits={"/v1/chat/completions": CHAT_LIST_MAX, "/v1/chat/completions/{completion_id}/messages": CHAT_LIST_MAX,
                                          "/v1/files": FILE_LIST_MAX}, form_paths=form_paths)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _database_keys(stack: Stack, auth: AuthConfig) -> DatabaseKeys | None:
    if auth.database_keys is None:
        return None
    from runtime.keys import DatabaseKeys

    return DatabaseKeys(stack.storage.database("metadata"), auth.database_keys.cache_s)


def _access_policy(stack: Stack, auth: AuthConfig) -> AccessPolicy | None:
    if not auth.access_policy:
        return None
    from runtime.access import AccessPolicy, PrincipalRegistry

    return AccessPolicy(auth.access_policy, PrincipalRegistry(stack.storage.database("metadata")))


def _serve_metrics(app: FastAPI, metrics: Metrics, path: str) -> None:
    async def exposition() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    app.add_api_route(path, exposition, methods=["GET"], summary="Prometheus metrics", tags=["system"], include_in_schema=False)


def install_error_handlers(app: FastAPI) -> None:
    """OpenAI-shaped bodies for our errors, validation errors and unknown routes."""
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)


async def _api_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, APIError)
    return api_error_response(error)


async def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    return JSONResponse(validation_error_body(error.errors()), status_code=400)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if isinstance(error.__cause__, APIError):
        # FastAPI wraps any error raised while it reads the body (such as our size limit) in a 400.
        return await _api_error(request, error.__cause__)
    if error.status_code == 404:
        message = f"Unknown route: {request.method} {request.url.path}"
    elif error.status_code == 405:
        allowed = _allowed_methods(request)
        message = f"Method {request.method} is not allowed on {request.url.path} (allowed: {', '.join(allowed)})"
        error.headers = {**dict(error.headers or {}), "Allow": ", ".join(allowed)}
    else:
        message = str(error.detail)
    return JSONResponse(
        error_body(message, "invalid_request_error", None, None),
        status_code=error.status_code,
        headers=dict(error.headers or {}),
    )


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path: Starlette's 405 names only the first route's."""
    table: list[tuple[re.Pattern[str], set[str]]] = getattr(request.app.state, "route_methods", [])
    return sorted({method for pattern, methods in table if pattern.match(request.url.path) for method in methods})


def _route_methods(router: APIRouter, prefix: str) -> list[tuple[re.Pattern[str], set[str]]]:
    return [(compile_path(prefix + route.path)[0], set(route.methods or ())) for route in router.routes if isinstance(route, APIRoute)]
