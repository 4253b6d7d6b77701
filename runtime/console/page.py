"""What a console page handler works with: its request, its session, the API as its principal,
and the templates (`Page`); and the headers every console answer carries."""

from __future__ import annotations

import json
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from runtime.console.context import ConsoleContext
from runtime.console.session import Session, SessionKeys

__all__ = ["SECURITY_HEADERS", "Page", "Views"]

SECURITY_HEADERS = {
    "content-security-policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "x-frame-options": "DENY", "cache-control": "no-store",
}


class Views:
    """The templates, the session keys and the server's context, shared by every page."""

    def __init__(self, context: ConsoleContext, templates: jinja2.Environment, keys: SessionKeys) -> None:
        self.context, self.templates, self.keys = context, templates, keys


class Page:
    """A request to a console page: its session, and the API as its principal."""

    def __init__(self, request: Request, console: Views, session: Session, operator: bool = False) -> None:
        self.request, self.console, self.session = request, console, session
        self.operator = operator
        """Whether the operator's page is the principal's to see (its link is shown)."""

    async def api(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """The API's answer (status, parsed JSON) to a request of the signed-in principal's."""
        payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        answer = await self.console.context.loopback(method, f"/v1{path}", payload, self.session.principal, headers)
        try:
            return answer.status, json.loads(answer.body) if answer.body else None
        except ValueError:
            return answer.status, answer.body

    def failed(self, status: int, body: Any) -> HTMLResponse:
        """The API's refusal (its status and message) as a page."""
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else str(body)[:500]
        return self.render("error.html", status=status if status >= 400 else 500, status_code=status, message=message)

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.console.templates.get_template(template).render(
            csrf=self.console.keys.csrf(self.session), principal=self.session.principal, signed_in=self.console.context.authenticate,
            path=self.request.url.path, operator=self.operator, **values)
        return HTMLResponse(html, status, headers=SECURITY_HEADERS)


