"""Routes every stack serves, whatever its APIs: health, version, providers, routes."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from starlette.responses import Response

from runtime.apis.common import JSONBytes
from runtime.http.routing import Routes
from runtime.stack import Stack

__all__ = ["redact", "stack_version", "system_routes"]

# "token" but not "tokens": `max_tokens` and `context_tokens` are counts, `access_token` is a secret.
_SECRET_KEY = re.compile(r"(api[_-]?key|secret|password|passwd|token(?!s)|credential|authorization)", re.IGNORECASE)
_DSN_PASSWORD = re.compile(r"(?P<scheme>[a-z0-9+.\-]+://[^:/@]+):[^@/]*@", re.IGNORECASE)
REDACTED = "********"


@runtime_checkable
class HealthReporter(Protocol):
    """An API implementation that knows the state of its providers' upstreams."""

    def health(self) -> dict[str, dict[str, Any]]: ...


def stack_version() -> str:
    try:
        return version("stack")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def redact(value: Any, key: str = "") -> Any:
    """A copy of a config value with secrets masked: secret-looking keys, DSN passwords, and
    the values of every `headers` mapping (what an HTTP header carries is often a credential)."""
    if isinstance(value, dict):
        if key == "headers":
            return {k: REDACTED if v not in (None, "") else v for k, v in value.items()}
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(item, key) for item in value]
    if _SECRET_KEY.search(key) and value not in (None, ""):
        return REDACTED
    if isinstance(value, str):
        return _DSN_PASSWORD.sub(rf"\g<scheme>:{REDACTED}@", value)
    return value


def system_routes(stack: Stack, openapi: Callable[[], dict[str, Any]]) -> Routes:
    """/v1/health, /v1/version, /v1/providers and /v1/inspect/routes (which reads `openapi()`)."""
    router = Routes(prefix="/v1", tags=["system"])
    plan = stack.plan

    @router.get("/health")  # a direct route: probes call it every few seconds, never a reason to build FastAPI
    async def health() -> Response:
        # Always a 200 while the server answers: a provider whose upstream is down, or a database
        # that does not answer (each opened backend is asked `SELECT 1`, 2 s at most), is
        # reported here (status "degraded") and in the errors of the requests that need it.
        providers: dict[str, Any] = {}
        for api, impl in stack.impls.items():
            if isinstance(impl, HealthReporter):
                providers.update({f"{api.value}/{pid}": state for pid, state in impl.health().items()})
        storage = await stack.storage.health()
        degraded = any(state.get("status") == "unavailable" for state in (*providers.values(), *storage.values()))
        return JSONBytes({"status": "degraded" if degraded else "ok", "providers": providers, "storage": storage})

    @router.get("/version")
    async def get_version() -> Response:
        return JSONBytes({"version": stack_version()})

    @router.get("/providers")
    async def list_providers() -> Response:
        active = [
            {
                "api": p.api.value,
                "provider_id": p.provider_id,
                "provider_type": p.spec.name,
                "status": "active",
                "served": p.api in plan.served_apis,
                "config": redact(p.config.model_dump(mode="json")),
            }
            for p in plan.providers
        ]
        inactive = [
            {
                "api": p.api.value,
                "provider_id": p.provider_id,
                "provider_type": p.provider_type,
                "status": "inactive",
                "missing_env": list(p.missing_env),
                "waiting_for": [api.value for api in p.waiting_for],
            }
            for p in plan.inactive
        ]
        return JSONBytes({"object": "list", "data": active + inactive})

    @router.get("/inspect/routes")
    async def list_routes() -> dict[str, Any]:
        # The OpenAPI document is the one complete view of the routes (FastAPI nests included
        # routers), and FastAPI builds it once.
        routes = []
        for path, operations in openapi()["paths"].items():
            tags = {tag for operation in operations.values() for tag in operation.get("tags", ())}
            routes.append({"route": path, "methods": sorted(m.upper() for m in operations), "api": min(tags, default=None)})
        return {"object": "list", "data": routes}

    return router
