"""The HTTP surface of each API, listed in one place.

Each API package is split the same way: `protocol.py` (the typing.Protocol its providers
implement), `models.py` (wire models) and `routes.py` (thin routes: one call into the
implementation per route). `SURFACES` below is the only registry of routers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from providers.spec import Api
from runtime.apis.conversations import routes as conversations_routes
from runtime.apis.conversations.protocol import ConversationsProvider
from runtime.apis.files import routes as files_routes
from runtime.apis.files.protocol import FilesProvider
from runtime.apis.inference import routes as inference_routes
from runtime.apis.inference.protocol import InferenceProvider
from runtime.apis.inference.router import open_inference_router
from runtime.apis.responses import routes as responses_routes
from runtime.apis.responses.protocol import ResponsesProvider
from runtime.apis.tool_runtime.protocol import ToolRuntime
from runtime.apis.tool_runtime.router import open_tool_router
from runtime.apis.vector_stores import routes as vector_stores_routes
from runtime.apis.vector_stores.protocol import VectorStoresProvider
from runtime.apis.prompts import routes as prompts_routes
from runtime.apis.safety import routes as safety_routes
from runtime.apis.safety.protocol import SafetyProvider
from runtime.apis.prompts.protocol import PromptsProvider

if TYPE_CHECKING:
    from builder.resolve import StackPlan
    from runtime.storage import Database

__all__ = ["SURFACES", "ApiContext", "ApiSurface"]


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
    router: Callable[..., APIRouter] | None
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


SURFACES: dict[Api, ApiSurface] = {
    Api.inference: ApiSurface(Api.inference, inference_routes.router, open_inference_router, InferenceProvider,
                              uses=(Api.files, Api.safety)),
    Api.responses: ApiSurface(Api.responses, responses_routes.router, protocol=ResponsesProvider),
    Api.conversations: ApiSurface(Api.conversations, conversations_routes.router, protocol=ConversationsProvider),
    Api.tool_runtime: ApiSurface(Api.tool_runtime, None, open_tool_router, ToolRuntime),
    Api.files: ApiSurface(Api.files, files_routes.router, protocol=FilesProvider, body_limits=files_routes.upload_limits),
    Api.vector_stores: ApiSurface(Api.vector_stores, vector_stores_routes.router, protocol=VectorStoresProvider),
    Api.prompts: ApiSurface(Api.prompts, prompts_routes.router, protocol=PromptsProvider),
    Api.safety: ApiSurface(Api.safety, safety_routes.router, protocol=SafetyProvider),
}
