"""The HTTP surface of each API, listed in one place.

An API's contract (its `typing.Protocol` and wire models) is in `contract/<api>/`; here are its
routes (`runtime/apis/<api>/routes.py`: thin routes, one call into the implementation per route)
and, for an API served by several providers at once, the layer over them (the inference router, the
tool router). `SURFACES` below is the only registry of routers; an API's modules are imported when a
stack first asks for its surface. `ROUTE_PATHS` lists each API's paths without importing them, for
the answer a route of an API run.yaml does not configure gets (runtime.apis.unconfigured).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from contract.spec import Api
from runtime.apis.surface import ApiContext, ApiSurface
from runtime.http.forms import FormFields

__all__ = ["ROUTE_PATHS", "SURFACES", "ApiContext", "ApiSurface"]


def _inference() -> ApiSurface:
    from runtime.apis.inference import routes
    from contract.inference.protocol import InferenceProvider
    from runtime.apis.inference.router import open_inference_router

    return ApiSurface(Api.inference, routes.router, open_inference_router, InferenceProvider, uses=(Api.files, Api.safety))


def _responses() -> ApiSurface:
    from runtime.apis.responses import routes
    from contract.responses.protocol import ResponsesProvider

    # The Open Responses specification lets these take a form too.
    fields = FormFields(texts=frozenset({"model", "input", "instructions", "previous_response_id", "conversation", "prompt_cache_key",
                                         "safety_identifier", "user", "service_tier", "truncation", "tool_choice"}),
                        lists=frozenset({"include", "tools"}))
    forms = {path: fields for path in ("/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens")}
    return ApiSurface(Api.responses, routes.router, protocol=ResponsesProvider, form_bodies=forms)


def _conversations() -> ApiSurface:
    from runtime.apis.conversations import routes
    from contract.conversations.protocol import ConversationsProvider

    return ApiSurface(Api.conversations, routes.router, protocol=ConversationsProvider)


def _tool_runtime() -> ApiSurface:
    from contract.tool_runtime.protocol import ToolRuntime
    from runtime.apis.tool_runtime.router import open_tool_router

    return ApiSurface(Api.tool_runtime, None, open_tool_router, ToolRuntime)


def _files() -> ApiSurface:
    from runtime.apis.files import routes
    from contract.files.protocol import FilesProvider

    return ApiSurface(Api.files, routes.router, protocol=FilesProvider, body_limits=routes.upload_limits, uses=(Api.vector_stores,))


def _vector_stores() -> ApiSurface:
    from runtime.apis.vector_stores import routes
    from contract.vector_stores.protocol import VectorStoresProvider

    return ApiSurface(Api.vector_stores, routes.router, protocol=VectorStoresProvider)


def _prompts() -> ApiSurface:
    from runtime.apis.prompts import routes
    from contract.prompts.protocol import PromptsProvider

    return ApiSurface(Api.prompts, routes.router, protocol=PromptsProvider)


def _safety() -> ApiSurface:
    from runtime.apis.safety import routes
    from contract.safety.protocol import SafetyProvider

    return ApiSurface(Api.safety, routes.router, protocol=SafetyProvider)


def _messages() -> ApiSurface:
    from runtime.apis.messages import routes
    from contract.messages.protocol import MessagesProvider

    return ApiSurface(Api.messages, routes.router, protocol=MessagesProvider)


def _batches() -> ApiSurface:
    from runtime.apis.batches import routes
    from contract.batches.protocol import BatchesProvider

    return ApiSurface(Api.batches, routes.router, protocol=BatchesProvider)


def _containers() -> ApiSurface:
    from runtime.apis.containers import routes
    from contract.containers.protocol import ContainersProvider

    return ApiSurface(Api.containers, routes.router, protocol=ContainersProvider, body_limits=routes.upload_limits)


def _sandboxes() -> ApiSurface:
    from contract.sandboxes.protocol import SandboxBackend

    return ApiSurface(Api.sandboxes, None, protocol=SandboxBackend)


class _Surfaces(Mapping[Api, ApiSurface]):
    """Each API's surface, its modules imported the first time it is asked for: a stack imports
    the routes of the APIs its run.yaml lists, not the others' (which have none to serve)."""

    def __init__(self, loaders: dict[Api, Callable[[], ApiSurface]]) -> None:
        self._loaders = loaders
        self._loaded: dict[Api, ApiSurface] = {}

    def __getitem__(self, api: Api) -> ApiSurface:
        surface = self._loaded.get(api)
        if surface is None:
            surface = self._loaded[api] = self._loaders[api]()
        return surface

    def __iter__(self) -> Iterator[Api]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


SURFACES: Mapping[Api, ApiSurface] = _Surfaces({
    Api.inference: _inference, Api.responses: _responses, Api.conversations: _conversations, Api.tool_runtime: _tool_runtime,
    Api.files: _files, Api.vector_stores: _vector_stores, Api.prompts: _prompts, Api.safety: _safety, Api.messages: _messages,
    Api.batches: _batches, Api.containers: _containers, Api.sandboxes: _sandboxes,
})

ROUTE_PATHS: Mapping[Api, tuple[str, ...]] = {
    Api.inference: ("/chat/completions", "/chat/completions/{completion_id}", "/chat/completions/{completion_id}/messages", "/completions",
                    "/embeddings", "/models", "/models/{model_id:path}"),
    Api.responses: ("/responses", "/responses/compact", "/responses/input_tokens", "/responses/{response_id}",
                    "/responses/{response_id}/cancel", "/responses/{response_id}/input_items"),
    Api.conversations: ("/conversations", "/conversations/{conversation_id}", "/conversations/{conversation_id}/items",
                        "/conversations/{conversation_id}/items/{item_id}"),
    Api.files: ("/files", "/files/{file_id}", "/files/{file_id}/content"),
    Api.vector_stores: ("/vector_stores", "/vector_stores/{store_id}", "/vector_stores/{store_id}/search", "/vector_stores/{store_id}/files",
                        "/vector_stores/{store_id}/files/{file_id}", "/vector_stores/{store_id}/files/{file_id}/content",
                        "/vector_stores/{store_id}/file_batches", "/vector_stores/{store_id}/file_batches/{batch_id}",
                        "/vector_stores/{store_id}/file_batches/{batch_id}/cancel", "/vector_stores/{store_id}/file_batches/{batch_id}/files"),
    Api.prompts: ("/prompts", "/prompts/{prompt_id}", "/prompts/{prompt_id}/versions", "/prompts/{prompt_id}/set-default-version"),
    Api.safety: ("/moderations",),
    Api.messages: ("/messages", "/messages/count_tokens"),
    Api.batches: ("/batches", "/batches/{batch_id}", "/batches/{batch_id}/cancel"),
    Api.containers: ("/containers", "/containers/{container_id}", "/containers/{container_id}/files",
                     "/containers/{container_id}/files/{file_id}", "/containers/{container_id}/files/{file_id}/content"),
}
"""The paths (under /v1) of each API's routes, every method alike: the same as its router declares
(a unit test holds them together), listed here so that a stack answers the routes of an API it does
not serve without importing that API's modules."""
