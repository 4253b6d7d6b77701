"""Routes of the inference API: /v1/chat/completions, /v1/completions (legacy), /v1/embeddings, /v1/models.

The create routes read the raw body and hand it on: the upstream validates the parameters it
knows, so every field the SDK sends (and any `extra_body` field) reaches it unchanged, and a
request whose model needs no renaming is forwarded as the very bytes the client sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from contract.checks import parse_json_object
from contract.files.protocol import FilesProvider
from contract.safety.protocol import SafetyProvider
from runtime.apis.common import JSONBytes, unless_disconnected
from runtime.apis.files.inline import chat_messages_with_files
from runtime.apis.inference.anthropic_models import anthropic_model, anthropic_models_page
from runtime.apis.inference.answers import json_or_gone, new_messages, prompt_texts, refused, refused_text, sse_response
from runtime.apis.inference.bodies import (
    CHAT_BODY, COMPLETIONS_BODY, EMBEDDINGS_BODY, check_chat_body, check_completions_body, check_embeddings_body,
)
from runtime.apis.inference.stored_routes import add_stored_routes
from runtime.apis.safety.guard import guard_input
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

if TYPE_CHECKING:
    from runtime.apis.inference.router import InferenceRouter

__all__ = ["router"]


def router(impl: InferenceRouter, files: FilesProvider | None = None, safety: SafetyProvider | None = None) -> Routes:
    routes = Routes()
    _add_completion_routes(routes, impl, files, safety)
    add_stored_routes(routes, impl)
    _add_embedding_and_model_routes(routes, impl)
    return routes


def _add_completion_routes(routes: Routes, impl: InferenceRouter, files: FilesProvider | None, safety: SafetyProvider | None) -> None:
    """Chat completions and legacy completions, each checked by the input guardrail when run.yaml
    switches it on, and by the output guardrail in the router."""
    guarded = safety if safety is not None and safety.guardrails.input else None
    output_guard = safety if safety is not None and safety.guardrails.output else None

    @routes.post("/chat/completions", summary="Create a chat completion (streamed with `stream: true`)", openapi_extra=CHAT_BODY)
    async def create_chat_completion(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        check_chat_body(body)
        forwarded: bytes | None = raw
        if b'"file_id"' in raw:  # a bytes scan: the hot path parses nothing more
            body["messages"] = await chat_messages_with_files(body["messages"], files)
            forwarded = None  # the upstream is sent the body as read in
        if guarded is not None:
            refusal = await guard_input(guarded, None, new_messages(body["messages"]))
            if refusal is not None:
                return await refused(impl, body, refusal)
        if body.get("stream") is True:
            return await sse_response(request, await impl.stream_chat_completion(body, forwarded, guard=output_guard))
        return json_or_gone(await unless_disconnected(request, impl.chat_completion(body, forwarded, guard=output_guard)))

    @routes.post("/completions", summary="Create a completion (the legacy API; streamed with `stream: true`)", openapi_extra=COMPLETIONS_BODY)
    async def create_completion(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        check_completions_body(body)
        if guarded is not None:
            refusal = await guard_input(guarded, None, [{"role": "user", "content": text} for text in prompt_texts(body["prompt"])])
            if refusal is not None:
                return refused_text(body)
        if body.get("stream") is True:
            return await sse_response(request, await impl.stream_text_completion(body, raw, guard=output_guard))
        return json_or_gone(await unless_disconnected(request, impl.text_completion(body, raw, guard=output_guard)))


def _add_embedding_and_model_routes(routes: Routes, impl: InferenceRouter) -> None:
    @routes.post("/embeddings", summary="Create embeddings", openapi_extra=EMBEDDINGS_BODY)
    async def create_embeddings(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        check_embeddings_body(body)
        return json_or_gone(await unless_disconnected(request, impl.embeddings(body, raw)))

    @routes.get("/models", summary="List models (in Anthropic's shape when the request has `anthropic-version`)")
    async def list_models(request: Request) -> Response:
        await impl.refresh_if_stale()
        if "anthropic-version" in request.headers:
            return JSONBytes(anthropic_models_page([anthropic_model(entry) for entry in impl.models()]))
        return JSONBytes({"object": "list", "data": [entry.public() for entry in impl.models()]})

    @routes.get("/models/{model_id:path}", summary="Get a model")
    async def get_model(model_id: str, request: Request) -> Response:
        entry = await impl.resolve(model_id)
        return JSONBytes(anthropic_model(entry) if "anthropic-version" in request.headers else entry.public())
