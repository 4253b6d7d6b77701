"""The console's ASGI app: sign-in, the session and CSRF checks, the security headers every page
carries, and the rendering of its pages (`pages.py`, `playground.py`) from jinja2 templates with
autoescaping on (whatever a user stored shows as text)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from runtime.console.context import ConsoleContext
from runtime.console.page import SECURITY_HEADERS, Page, Views
from runtime.console import more_pages, operate, pages, playground, usage
from runtime.console.session import COOKIE, LIFETIME_S, Session, SessionKeys

__all__ = ["Console"]

HERE = Path(__file__).resolve().parent
_OPEN = ("/console/login", "/console/static/")


Handler = Callable[[Page], Awaitable[Response]]


class Console:
    """See the module's docstring."""

    def __init__(self, context: ConsoleContext) -> None:
        self.context = context
        self.keys = SessionKeys(context.state_dir)
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                                            undefined=jinja2.StrictUndefined)
        self.views = Views(context, self.templates, self.keys)
        self.templates.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
        self.templates.filters["q"] = lambda value: quote(str(value), safe="")
        routes = [Route("/console/login", self._login, methods=["GET", "POST"]), Route("/console/logout", self._logout, methods=["POST"]),
                  Route("/console/static/{name}", self._static)]
        for path, handler, methods in [*pages.ROUTES, *more_pages.ROUTES, *playground.ROUTES, *operate.ROUTES, *usage.ROUTES]:
            routes.append(Route(f"/console{path}", self._page(handler), methods=methods))
        self.router = Router(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.router(scope, receive, send)

    def _page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.keys.read(request.cookies.get(COOKIE))
            fresh = None
            if session is None or (self.context.authenticate is not None and session.principal is None):
                if self.context.authenticate is not None:
                    return RedirectResponse(f"/console/login?next={quote(request.url.path)}", 303, headers=SECURITY_HEADERS)
                session, fresh = self.keys.new(None)  # auth is off: a session of no one, for its CSRF token
            if request.method == "POST" and not await self._csrf_ok(request, session):
                return PlainTextResponse("The form's CSRF token is missing or wrong: reload the page.", 403, headers=SECURITY_HEADERS)
            admin = self.context.admin
            response = await handler(Page(request, self.views, session, admin is not None and await admin(session.principal)))
            if fresh is not None:
                self._set_cookie(response, fresh)
            return response

        return endpoint

    async def _csrf_ok(self, request: Request, session: Session) -> bool:
        token = request.headers.get("x-csrf-token")
        if token is None and request.headers.get("content-type", "").startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
            token = (await request.form()).get("csrf")  # type: ignore[assignment]
        return isinstance(token, str) and token == self.keys.csrf(session)

    async def _login(self, request: Request) -> Response:
        authenticate = self.context.authenticate
        if authenticate is None:
            return RedirectResponse("/console/", 303, headers=SECURITY_HEADERS)
        error, target = None, request.query_params.get("next", "/console/")
        if request.method == "POST":
            form = await request.form()
            target = str(form.get("next") or "/console/")
            principal = await authenticate(str(form.get("api_key") or ""))
            if principal is not None:
                _, cookie = self.keys.new(principal)
                response = RedirectResponse(target if target.startswith("/console") else "/console/", 303, headers=SECURITY_HEADERS)
                self._set_cookie(response, cookie)
                return response
            error = "That key is not valid here."
        html = self.templates.get_template("login.html").render(error=error, next=target)
        return HTMLResponse(html, 401 if error else 200, headers=SECURITY_HEADERS)

    async def _logout(self, request: Request) -> Response:
        response = RedirectResponse("/console/login", 303, headers=SECURITY_HEADERS)
        response.delete_cookie(COOKIE, path="/console")
        return response

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ("console.css", "console.js", "operate.js"):
            return PlainTextResponse("Not found", 404)
        return FileResponse(HERE / "static" / name, headers={**SECURITY_HEADERS, "cache-control": "max-age=300"})

    def _set_cookie(self, response: Response, value: str) -> None:
        response.set_cookie(COOKIE, value, max_age=LIFETIME_S, path="/console", httponly=True, samesite="strict", secure=self.context.secure)
