"""The HTTP surface of each API, listed in one place.

Each API package is split the same way: `protocol.py` (the typing.Protocol its providers
implement), `models.py` (wire models) and `routes.py` (thin routes: one call into the
implementation per route). `SURFACES` below is the only registry of routers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter

from providers.spec import Api

__all__ = ["SURFACES", "ApiSurface", "combine_providers"]


@dataclass(frozen=True)
class ApiSurface:
    api: Api
    router: Callable[[Any], APIRouter]
    """Builds the API's routes (mounted under /v1) over its implementation."""
    combine: Callable[[Mapping[str, Any]], Any] | None = None
    """For an API served by several providers: builds the router that picks one per request."""


SURFACES: dict[Api, ApiSurface] = {}


def combine_providers(api: Api, providers: Mapping[str, Any]) -> Any:
    """The implementation an API's routes and dependents use, given its started providers."""
    surface = SURFACES.get(api)
    if surface is not None and surface.combine is not None:
        return surface.combine(providers)
    if len(providers) != 1:
        # The resolver allows several providers only for APIs whose surface can route.
        raise RuntimeError(f"the {api.value} API cannot combine {len(providers)} providers")
    return next(iter(providers.values()))
