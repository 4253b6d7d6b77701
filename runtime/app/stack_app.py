"""The ASGI app over a started stack: the routes of the served APIs plus the system routes.

The stack's middleware and its direct routes (runtime.http.direct_routes) answer what they can; every
other request (another route, a mistake FastAPI words, an unknown path, the OpenAPI document) goes
to a FastAPI app with all the routes, which is built, FastAPI imported with it, the first time one
comes (runtime.http.routing)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers, State
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from builder.config import AuthConfig
from contract.spec import Api
from runtime.apis import SURFACES
from runtime.apis.unavailable import NoModels, Unavailable, unavailable_message
from runtime.apis.unconfigured import NotServed, not_served
from runtime.security.auth import OPEN_PATHS, AuthFailed, AuthGuard, Authenticator
from runtime.observability.metrics import CONTENT_TYPE, Metrics
from runtime.observability.tracing import Tracing
from runtime.security.usage import CountUsage, UsageLedger
from runtime.security.quotas import Quotas
from runtime.http.forms import FormFields
from runtime.http.direct_routes import DirectRoutes, direct_routes
from runtime.http.errors import install_error_handlers
from runtime.http.anthropic import AnthropicErrors
from runtime.http.answered_by import AnsweredBy
from runtime.console.context import ConsoleContext
from runtime.console.mount import ConsoleGate
from runtime.http.middleware import Draining, RequestGuard
from runtime.http.routing import Routes, fastapi_router
from runtime.stack import Stack
from runtime.app.system_routes import stack_version, system_routes

if TYPE_CHECKING:
    from fastapi import FastAPI

    from runtime.security.access import AccessPolicy
    from runtime.security.keys import DatabaseKeys

__all__ = ["StackApp", "create_app"]

log = logging.getLogger("stack")

Mounted = tuple[Routes, str, list[str]]  # the routes, the prefix they are mounted under, their tags


class StackApp:
    """The ASGI app the server and the library client both run.

    `state` is shared with the FastAPI app (`request.app.state` reads the same whichever answers).
    `fastapi` is that app, built on first use; `openapi()` its amended OpenAPI document."""

    def __init__(self, state: State, build: Callable[[], FastAPI]) -> None:
        self.state = state
        self._build = build
        self._fastapi: FastAPI | None = None
        self._building: asyncio.Future[FastAPI] | None = None
        self.middleware_stack: ASGIApp = self.routed

    @property
    def fastapi(self) -> FastAPI:
        app = self._fastapi
        return app if app is not None else self._built(self._build())

    def _built(self, app: FastAPI) -> FastAPI:
        if self._fastapi is None:  # (built on a thread while something asked for it here: the first one stays)
            app.state = self.state
            self._fastapi = app
            log.debug("built the FastAPI app")
        return self._fastapi

    def openapi(self) -> dict[str, Any]:
        return self.fastapi.openapi()

    async def routed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The innermost app: what no direct route took, FastAPI routes. The first such request has
        FastAPI imported and built on a thread (0.1 to 0.4 s here), so the event loop goes on
        answering the others meanwhile; requests that come during it wait for the same build."""
        app = self._fastapi
        if app is None:
            if self._building is None:
                self._building = asyncio.get_running_loop().run_in_executor(None, self._build)
            building = self._building
            try:
                app = self._built(await asyncio.shield(building))
            except Exception:  # the build's own error (a request cancelled while it waits is not one)
                if self._building is building:
                    self._building = None  # tried again by the next request
                raise
        await app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        await self.middleware_stack(scope, receive, send)


def _api_routes(stack: Stack) -> list[Mounted]:
    """The routes of each API served, and of each whose providers are all inactive (a stand-in
    that says what to set)."""
    mounted: list[Mounted] = []
    for api in stack.plan.served_apis:
        surface = SURFACES.get(api)
        if surface is not None and surface.router is not None:
            uses = {used.value: stack.impls.get(used) for used in surface.uses}
            mounted.append((surface.router(stack.impls[api], **uses), "/v1", [api.value]))
    for api, inactive in stack.plan.unavailable_apis().items():
        surface = SURFACES.get(api)
        if surface is not None and surface.router is not None:
            stand_in = (NoModels if api is Api.inference else Unavailable)(unavailable_message(api, inactive))
            mounted.append((surface.router(stand_in, **{used.value: None for used in surface.uses}), "/v1", [api.value]))
    return mounted


def create_app(stack: Stack) -> StackApp:
    """The ASGI app the server and the library client both run."""
    state = State()
    mounted: list[Mounted] = [(system_routes(stack, lambda: app.openapi()), "", []), *_api_routes(stack)]
    server = stack.plan.config.server
    metrics = state.metrics = Metrics() if server.metrics is not None else None
    if metrics is not None and server.metrics is not None:
        mounted.append((_metrics_routes(metrics, server.metrics.path), "", []))
    state.route_methods = [entry for routes, prefix, _ in mounted for entry in _route_methods(routes, prefix)]
    limits: dict[tuple[str, str], int] = {}
    forms: dict[str, FormFields] = {}
    for api in stack.plan.served_apis:
        surface = SURFACES.get(api)
        if surface is None:
            continue
        if surface.body_limits is not None:
            limits.update(surface.body_limits(stack.impls[api]))
        forms.update(surface.form_bodies)
    state.draining = Draining()
    state.tracing = _tracing(stack)
    app = StackApp(state, lambda: _fastapi_app(stack, mounted, frozenset(forms)))
    # Innermost of the stack's middleware: the direct routes skip FastAPI altogether; behind them, the
    # routes of the APIs not served answer what to add to run.yaml (runtime.apis.unconfigured).
    fallback: ASGIApp = NotServed(app.routed, stack.plan, unserved) if (unserved := not_served(stack.plan)) else app.routed
    inner: ASGIApp = DirectRoutes(fallback, routes=direct_routes((routes, prefix) for routes, prefix, _ in mounted),
                                  all_routes=state.route_methods)
    if any(model.routed() for model in stack.plan.models):  # x-stack-deployment; no such model, no layer
        inner = AnsweredBy(inner)
    if (usage := _usage_ledger(stack)) is not None:  # inside auth, which finds each request's principal
        inner = CountUsage(inner, usage)
    auth = _AuthParts(stack, server.auth) if server.auth is not None else None  # one of each, the console's too
    if auth is not None:  # inside CORS, so a browser can read a 401; off, it costs nothing
        quotas = Quotas(auth.config.quotas) if auth.config.quotas is not None else None
        if quotas is not None:
            stack.closing.append(quotas.aclose)  # Redis: the tokens not sent yet
        open_paths = OPEN_PATHS | ({server.metrics.path} if server.metrics is not None and server.metrics.open else set())
        inner = AuthGuard(inner, authenticator=auth.authenticator, quotas=quotas, open_paths=open_paths, access=auth.access)
    if server.cors is not None:
        inner = CORSMiddleware(
            inner,
            allow_origins=server.cors.allow_origins,
            allow_methods=server.cors.allow_methods,
            allow_headers=server.cors.allow_headers,
            allow_credentials=server.cors.allow_credentials,
            expose_headers=["x-request-id", "x-stack-deployment"],
        )
    if server.console:  # outside auth: the console signs in with a key into a session cookie, then reads the API as its principal
        inner = ConsoleGate(inner, _console_context(stack, auth, metrics, usage))
    # Outermost but one, and it counts requests when metrics are on: refusals (401, 413, 429, 503) are counted too.
    guard = RequestGuard(inner, max_body_bytes=server.max_request_bytes, route_limits=limits, form_paths=forms,
                                        draining=state.draining, metrics=metrics, tracing=state.tracing,
                                        log_context=server.logging is not None,
                                        access_log=server.logging is not None and server.logging.access_log,
                                        allowed_origins=frozenset(server.cors.allow_origins) if server.cors is not None else frozenset(),
                                        raw_forms=("/console/",) if server.console else ())
    # Outermost where Anthropic's clients are served: every refusal in their envelope.
    app.middleware_stack = AnthropicErrors(guard) if Api.messages in stack.plan.served_apis else guard
    # The providers' requests to the stack's own routes (a batch's) go through all of it.
    stack.loopback.attach(app, lambda: len(state.draining.unanswered))
    return app


def _fastapi_app(stack: Stack, mounted: list[Mounted], form_paths: frozenset[str]) -> FastAPI:
    """FastAPI with every route, for the requests the direct routes leave to it."""
    from fastapi import FastAPI

    app = FastAPI(
        title=f"stack: {stack.plan.config.name}",
        version=stack_version(),
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        redirect_slashes=False,  # a path ending in a slash is an unknown route (runtime.http.direct_routes refuses it first)
        # The stack traces and counts requests itself (server.tracing, server.metrics). FastAPI's
        # own OpenTelemetry would add a second set of spans wherever a global provider is set, and
        # checks the global providers on every request to know whether one is.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    for routes, prefix, tags in mounted:
        app.include_router(fastapi_router(routes), prefix=prefix, tags=list(tags))
    install_error_handlers(app)
    _document_as_served(app, stack, form_paths)
    return app


def _document_as_served(app: FastAPI, stack: Stack, form_paths: frozenset[str]) -> None:
    """`app.openapi()` (and /openapi.json) amended to the server's behaviour (runtime.app.openapi),
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
            from runtime.apis.inference.stored_routes import CHAT_LIST_MAX
            from runtime.app.openapi import amend

            document = amend(built(), auth=auth is not None, quotas=auth is not None and auth.quotas is not None,
                             open_paths=frozenset(open_paths),
                             list_limits={"/v1/chat/completions": CHAT_LIST_MAX, "/v1/chat/completions/{completion_id}/messages": CHAT_LIST_MAX,
                                          "/v1/files": FILE_LIST_MAX}, form_paths=form_paths)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _database_keys(stack: Stack, auth: AuthConfig) -> DatabaseKeys | None:
    if auth.database_keys is None:
        return None
    from runtime.security.keys import DatabaseKeys

    return DatabaseKeys(stack.storage.database("metadata"), auth.database_keys.cache_s)


def _access_policy(stack: Stack, auth: AuthConfig) -> AccessPolicy | None:
    if not auth.access_policy:
        return None
    from runtime.security.access import AccessPolicy, PrincipalRegistry

    return AccessPolicy(auth.access_policy, PrincipalRegistry(stack.storage.database("metadata")))


def _metrics_routes(metrics: Metrics, path: str) -> Routes:
    routes = Routes(tags=["system"])

    @routes.get(path, summary="Prometheus metrics", include_in_schema=False)
    async def exposition() -> Response:
        return Response(await metrics.scrape(), media_type=CONTENT_TYPE)

    return routes


def _route_methods(routes: Routes, prefix: str) -> list[tuple[re.Pattern[str], set[str]]]:
    return [(compile_path(prefix + route.path)[0], set(route.methods)) for route in routes.routes if not route.websocket]


class _AuthParts:
    """What run.yaml's auth makes, built once: the authentication layer and the console use the
    same objects (one key cache, one registry of principals)."""

    def __init__(self, stack: Stack, auth: AuthConfig) -> None:
        self.config = auth
        self.keys = _database_keys(stack, auth)
        self.authenticator = Authenticator(auth, self.keys)
        self.access = _access_policy(stack, auth)


def _tracing(stack: Stack) -> Tracing | None:
    config = stack.plan.config.server.tracing
    if config is None:
        return None
    tracing = Tracing(config)
    stack.closing.append(tracing.aclose)  # the spans not exported yet
    return tracing


def _usage_ledger(stack: Stack) -> UsageLedger | None:
    config = stack.plan.config.server.usage
    if config is None:
        return None
    ledger = UsageLedger(stack.storage.database("metadata"), config)
    stack.closing.append(ledger.aclose)  # the counts of the last seconds
    return ledger


def _console_context(stack: Stack, auth: _AuthParts | None, metrics: Metrics | None, usage: UsageLedger | None) -> ConsoleContext:
    """What the console needs of the server (the console itself is imported on its first request)."""

    async def authenticate(key: str) -> Any:
        if auth is None or not key:
            return None
        try:
            return await auth.authenticator.principal(Headers({"authorization": f"Bearer {key}"}))
        except AuthFailed:
            return None

    async def admin(principal: Any) -> bool:
        if auth is None:
            return True  # auth off: whoever reaches the server operates it
        if auth.access is None or principal is None:
            return False
        grants = await auth.access.grants(principal)
        return grants is not None and "read" in grants and grants["read"] is None  # reads every owner's objects

    server = stack.plan.config.server
    return ConsoleContext(stack.loopback, authenticate if auth is not None else None, stack.plan.state_dir,
                          secure=server.tls_certfile is not None, admin=admin, keys=auth.keys if auth is not None else None,
                          metrics=metrics.scrape if metrics is not None else None, usage=usage)
