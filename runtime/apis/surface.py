"""What an API's surface is: its routes, the implementation built over its providers, its protocol,
and what its routes need of the server (`ApiSurface`); and what that implementation is built from
(`ApiContext`). `runtime.apis.SURFACES` lists every API's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contract.spec import Api
from runtime.http.forms import FormFields
from runtime.http.routing import Routes

if TYPE_CHECKING:
    from builder.resolve import StackPlan
    from runtime.storage import Database

__all__ = ["ApiContext", "ApiSurface"]


@dataclass(frozen=True)
class ApiContext:
    """What an API surface gets to build the implementation its routes and dependents use."""

    plan: StackPlan
    providers: Mapping[str, Any]
    """The API's started providers, by provider_id, in run.yaml order."""
    databases: Callable[[str], Database]


@dataclass(frozen=True)
class ApiSurface:
    api: Api
    router: Callable[..., Routes] | None
    """Builds the API's routes (mounted under /v1) over its implementation; None for an API
    that other APIs use but clients do not call (tool_runtime)."""
    combine: Callable[[ApiContext], AbstractAsyncContextManager[Any]] | None = None
    """Builds the implementation over the API's providers (entered at start, left at shutdown);
    without it the API's single provider is its implementation."""
    protocol: type | None = None
    """The runtime-checkable Protocol every provider of the API must implement."""
    body_limits: Callable[[Any], Mapping[tuple[str, str], int]] | None = None
    """Request size limits of its own for some (method, path) of the API (file uploads)."""
    uses: tuple[Api, ...] = ()
    """Other APIs its routes read when the stack serves them, given to `router` as keyword
    arguments named after them (None when not served): chat reads files named by id."""
    form_bodies: Mapping[str, FormFields] = field(default_factory=dict)
    """POST paths whose JSON body may also come as a form (application/x-www-form-urlencoded),
    and how their fields read (runtime.http.forms)."""
