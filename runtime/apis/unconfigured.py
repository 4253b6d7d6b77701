"""The routes of an API the stack does not serve answer a 404 naming the API and what to add to
run.yaml, rather than an unknown route.

`POST /v1/moderations` on a stack with no safety provider (the starter has none) tells the client
which API that is, and the operator what to configure. An API whose providers are all inactive keeps
its routes instead (runtime.apis.unavailable: a 503 saying what to set). Nothing of an API not served
is imported or mounted for this: its paths come from `runtime.apis.ROUTE_PATHS`, looked at only for a
request no route took, and the OpenAPI document does not list them (the server serves none of them).

A 404 rather than a 503 or a 501: the server does not have the route, which is what OpenAI answers a
404 for, and a client that probes for a feature reads a 404 as "not here". A 5xx would say the server
failed, and the openai SDK retries every 5xx (twice by default) where nothing changes until the
operator edits run.yaml and restarts the server.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from builder.plugins import provider_names
from builder.resolve import StackPlan
from contract.errors import NotFoundError
from contract.spec import Api
from runtime.apis import ROUTE_PATHS
from runtime.http.direct_routes import api_error_response

__all__ = ["NotServed", "not_served", "not_served_message"]

PREFIX = "/v1/"


def not_served(plan: StackPlan) -> list[Api]:
    """The APIs with routes that the plan neither serves nor keeps as unavailable (503)."""
    unavailable = plan.unavailable_apis()
    return [api for api in ROUTE_PATHS if api not in plan.served_apis and api not in unavailable]


def not_served_message(plan: StackPlan, api: Api, method: str, path: str) -> str:
    config = plan.config
    if config.apis is not None and config.providers.get(api.value):  # it has providers: `apis:` is what leaves it out
        reason, fix = "run.yaml's `apis:` leaves it out", f"add {api.value!r} to `apis:`"
    else:
        names = provider_names(api)  # entry points' names, nothing imported
        installed = f"provider types installed: {', '.join(names)}" if names else "no provider type for it is installed"
        listed = f" and {api.value!r} to `apis:`" if config.apis is not None else ""
        reason, fix = "its run.yaml configures no provider for it", f"add one under `providers.{api.value}` ({installed}){listed}"
    return (f"{method} {path} is a route of the {api.value} API, which this server does not serve: {reason}. To serve it, {fix}, "
            "then restart the server.")


class NotServed:
    """ASGI: a request for a path of an API in `apis` answers a 404 naming it (code
    `api_not_configured`); any other request goes on to `app`. Any method alike: the API is not
    there to say which it takes."""

    def __init__(self, app: ASGIApp, plan: StackPlan, apis: list[Api]) -> None:
        self.app = app
        self.plan = plan
        self.templates: dict[str, list[tuple[list[str], Api]]] = {}  # by the path's first segment after /v1/
        for api in apis:
            for path in ROUTE_PATHS[api]:
                segments = path.lstrip("/").split("/")
                self.templates.setdefault(segments[0], []).append((segments, api))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api = self.api_of(scope["path"]) if scope["type"] == "http" else None
        if api is None:
            await self.app(scope, receive, send)
            return
        message = not_served_message(self.plan, api, scope["method"], scope["path"])
        await api_error_response(NotFoundError(message, code="api_not_configured"))(scope, receive, send)

    def api_of(self, path: str) -> Api | None:
        """The API not served that `path` is a route of, if any."""
        if not path.startswith(PREFIX):
            return None
        segments = path[len(PREFIX):].split("/")
        for template, api in self.templates.get(segments[0], ()):
            if _matches(template, segments):
                return api
        return None


def _matches(template: list[str], segments: list[str]) -> bool:
    """Segment by segment, as the router matches: a parameter takes one non-empty segment, and
    `{name:path}` at the end the rest of the path."""
    if template[-1].endswith(":path}"):
        if len(segments) < len(template):
            return False
        template, segments = template[:-1], segments[:len(template) - 1]
    elif len(segments) != len(template):
        return False
    return all(text == segment or (text.startswith("{") and segment != "") for text, segment in zip(template, segments))
