"""The inference API's implementation: picks the provider serving the request's model (the models
and their ids are the catalog's, runtime.apis.inference.catalog), calls it, passes its answer on
(runtime.apis.inference.upstream), and stores completions that ask to be stored."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from builder.config import ModelConfig
from contract import fastjson
from runtime.apis.inference.chunks import ChunkAccumulator, upstream_shape
from runtime.apis.inference.guarded import guard_completion, guard_stream, guard_text_completion
from contract.inference.protocol import InferenceProvider, MessagesPassthrough, MessagesTokenCount, TextCompletionProvider, UpstreamRequest
from runtime.apis.inference.anthropic_passthrough import account_message, metered_events, renamed, usage_of_message
from runtime.apis.inference.catalog import ModelCatalog, ModelEntry, routed_provider_id
from runtime.apis.inference.deployments import register
from runtime.apis.inference.store import ChatCompletionStore, new_completion_id
from runtime.apis.inference.upstream import (
    account, asking_usage, chunks_with_model, malformed, metered, parsed_chunk, parsed_completion, reshaped_embeddings,
    text_completion_choices, text_or_none, with_model,
)
from contract.safety.protocol import SafetyProvider
from contract.errors import APIError, InvalidRequestError
from runtime.observability.logs import note_model
from runtime.security.usage import note_model as note_used_model
from runtime.observability.metrics import current_metrics, usage_counts
from runtime.observability.tracing import current_tracing
from runtime.security.quotas import token_meter

if TYPE_CHECKING:
    from runtime.apis.surface import ApiContext

__all__ = ["InferenceRouter", "ModelEntry", "open_inference_router"]

log = logging.getLogger("stack")

REFRESH_TIMEOUT_S = 10.0
MISS_REFRESH_INTERVAL_S = 5.0
LIST_REFRESH_INTERVAL_S = 60.0


class InferenceRouter:
    """Routes chat completions, legacy completions and embeddings to the provider serving the requested model."""

    def __init__(self, providers: Mapping[str, InferenceProvider], registered: Sequence[ModelConfig], store: ChatCompletionStore) -> None:
        self.providers = dict(providers)
        self.catalog = ModelCatalog(providers, registered)
        self.store = store
        # The catalog's, for the routes and the APIs that call models.
        self.resolve = self.catalog.resolve
        self.models = self.catalog.models
        self.refresh_models = self.catalog.refresh_models
        self.refresh_if_stale = self.catalog.refresh_if_stale
        # A model with several deployments or fallbacks is served by a provider of its own, which
        # calls the others (deployments.py); every other model's requests go straight to its provider.
        self.deployments = register(list(registered), self.providers, self.resolve, self.catalog.unreachable)
        self._messages_providers = {pid for pid, provider in self.providers.items() if isinstance(provider, MessagesPassthrough)}

    def health(self) -> dict[str, dict[str, Any]]:
        """Each provider's state, and each model with deployments: theirs (`deployments`), its
        status `unavailable` when none may take a request."""
        states = self.catalog.health()
        for model_id, served in self.deployments.items():
            view = served.view()
            down = all(d["circuit"] == "open" or d["resting_s"] > 0 for d in view["deployments"])
            states[routed_provider_id(model_id)] = {"status": "unavailable" if down else "ok", **view}
        return states

    async def _route(self, body: Mapping[str, Any], raw: bytes | None) -> tuple[str, UpstreamRequest, str | None]:
        """The provider, the request for it, and the client's model id when the upstream knows
        the model by another name (`provider_id/model`, an alias): answers carry the client's id."""
        entry = await self.resolve(body.get("model"))
        note_model(body["model"])  # for the request's access line, as the client named it
        note_used_model(body["model"])  # and its usage over time
        if entry.provider_model_id == body["model"]:
            return entry.provider_id, UpstreamRequest(body, raw), None
        return entry.provider_id, UpstreamRequest({**body, "model": entry.provider_model_id}), body["model"]

    # --- chat completions -----------------------------------------------------------------

    async def chat_completion(self, body: Mapping[str, Any], raw: bytes | None = None, *, echo_model: bool = True,
                              guard: SafetyProvider | None = None) -> bytes:
        """The upstream's ChatCompletion JSON; with `store: true`, stored first under an id of
        ours, which the answer carries. Its `model` is the client's id (with `echo_model=False`,
        the upstream's: for callers that only read the output, which saves a re-encoding). With
        a `guard`, the answer passes the output guardrail before it is stored or returned."""
        provider_id, request, requested = await self._route(body, raw)
        metrics, started = current_metrics(), time.perf_counter()
        result = await self._call(provider_id, self.providers[provider_id].chat_completion(request), "chat", request, requested)
        if result[:1] != b"{" or result.rstrip()[-1:] != b"}":  # a body cut short (the bytes are passed on unparsed)
            raise malformed(provider_id, result)
        if metrics is not None or token_meter() is not None:  # the usage is read (only then)
            await account(result, provider_id, request, "chat", metrics, started)
        if body.get("store") is not True and guard is None:
            return with_model(result, requested) if requested is not None and echo_model else result
        completion = parsed_completion(result, provider_id)
        if guard is not None:
            await guard_completion(guard, completion)
        if requested is not None:
            completion["model"] = requested
        if body.get("store") is True:
            upstream_id = completion.get("id")
            completion["id"] = new_completion_id()
            await self.store.save(completion, list(body.get("messages") or ()), body.get("metadata"), text_or_none(upstream_id))
        return fastjson.dumps(completion)

    async def stream_chat_completion(
        self, body: Mapping[str, Any], raw: bytes | None = None, *, echo_model: bool = True, guard: SafetyProvider | None = None
    ) -> AsyncIterator[bytes]:
        """Chunk payloads as the upstream sends them (with the client's model id, as above); with
        `store: true` every chunk carries the id of ours the completion is stored under, and the
        folded completion is stored after the last chunk, before the caller sends `[DONE]`. With
        a `guard`, chunks pass the output guardrail (held and checked in batches) first."""
        metrics, tracing = current_metrics(), current_tracing()
        watched = token_meter() is not None or metrics is not None or tracing is not None
        body, raw, hidden_usage = asking_usage(body, raw) if watched else (body, raw, False)
        provider_id, request, requested = await self._route(body, raw)
        chunks = self.providers[provider_id].stream_chat_completion(request)
        if watched:
            chunks = metered(chunks, hidden_usage, metrics, provider_id, request, tracing)
        if body.get("store") is True or guard is not None:
            return self._rewritten_stream(chunks, body, requested, provider_id, guard)
        if requested is not None and echo_model:
            chunks = chunks_with_model(chunks, requested, provider_id)
        return chunks

    async def _rewritten_stream(self, chunks: AsyncIterator[bytes], body: Mapping[str, Any], model: str | None,
                                provider_id: str, guard: SafetyProvider | None) -> AsyncIterator[bytes]:
        stored = body.get("store") is True
        completion_id = new_completion_id() if stored else None
        folded = ChunkAccumulator(id=completion_id or "")
        upstream_id: Any = None

        async def parsed() -> AsyncIterator[dict[str, Any]]:
            nonlocal upstream_id
            async for raw in chunks:
                chunk = parsed_chunk(raw, provider_id)
                upstream_id = upstream_id or chunk.get("id")
                if completion_id is not None:
                    chunk["id"] = completion_id
                if model is not None:
                    chunk["model"] = model
                yield chunk

        n = body.get("n")
        passed = parsed() if guard is None else guard_stream(guard, parsed(), n if isinstance(n, int) and n > 0 else 1)
        async for chunk in passed:
            if stored:
                with upstream_shape(provider_id):
                    folded.add(chunk)
            yield fastjson.dumps(chunk)
        if stored:
            with upstream_shape(provider_id):
                completion = folded.completion()
            await self.store.save(completion, list(body.get("messages") or ()), body.get("metadata"), text_or_none(upstream_id))

    # --- legacy completions -----------------------------------------------------------------

    async def text_completion(self, body: Mapping[str, Any], raw: bytes | None = None, *, guard: SafetyProvider | None = None) -> bytes:
        """The upstream's Completion JSON (`/v1/completions`), with the client's model id; with a
        `guard`, each choice's text passes the output guardrail first."""
        provider_id, request, requested = await self._route(body, raw)
        provider = self._text_provider(provider_id, body["model"])
        metrics, started = current_metrics(), time.perf_counter()
        result = await self._call(provider_id, provider.completion(request), "text_completion", request, requested)
        if result[:1] != b"{" or result.rstrip()[-1:] != b"}":
            raise malformed(provider_id, result)
        if metrics is not None or token_meter() is not None:
            await account(result, provider_id, request, "text_completion", metrics, started)
        if guard is None:
            return with_model(result, requested) if requested is not None else result
        completion = parsed_completion(result, provider_id)
        await guard_text_completion(guard, completion)
        if requested is not None:
            completion["model"] = requested
        return fastjson.dumps(completion)

    async def stream_text_completion(self, body: Mapping[str, Any], raw: bytes | None = None, *,
                                     guard: SafetyProvider | None = None) -> AsyncIterator[bytes]:
        """The upstream's Completion chunk payloads, with the client's model id (as for chat)."""
        metrics, tracing = current_metrics(), current_tracing()
        watched = token_meter() is not None or metrics is not None or tracing is not None
        body, raw, hidden_usage = asking_usage(body, raw) if watched else (body, raw, False)
        provider_id, request, requested = await self._route(body, raw)
        chunks = self._text_provider(provider_id, body["model"]).stream_completion(request)
        if watched:
            chunks = metered(chunks, hidden_usage, metrics, provider_id, request, tracing, "text_completion")
        if guard is not None:
            return self._guarded_text_stream(chunks, body, requested, provider_id, guard)
        if requested is not None:
            chunks = chunks_with_model(chunks, requested, provider_id)
        return chunks

    async def _guarded_text_stream(self, chunks: AsyncIterator[bytes], body: Mapping[str, Any], model: str | None, provider_id: str,
                                   guard: SafetyProvider) -> AsyncIterator[bytes]:
        async def parsed() -> AsyncIterator[dict[str, Any]]:
            async for raw in chunks:
                chunk = parsed_chunk(raw, provider_id)
                if model is not None:
                    chunk["model"] = model
                yield chunk

        async for chunk in guard_stream(guard, parsed(), text_completion_choices(body), text_completion=True):
            yield fastjson.dumps(chunk)

    def _text_provider(self, provider_id: str, model: str) -> TextCompletionProvider:
        provider = self.providers[provider_id]
        if isinstance(provider, TextCompletionProvider):
            return provider
        entry = self.catalog.lookup(model)
        if entry is not None and entry.model_type == "embedding":
            raise InvalidRequestError(f"The model '{model}' is an embedding model: it does not serve the completions API.", param="model",
                                      code="unsupported_model")
        raise InvalidRequestError(f"The model '{model}' does not serve the legacy completions API (its provider, '{provider_id}', does "
                                  "not implement it): use /v1/chat/completions.", param="model", code="unsupported_model")

    async def embeddings(self, body: Mapping[str, Any], raw: bytes | None = None) -> bytes:
        """Embeddings JSON. base64 (the SDK's default) is encoded here from floats, since not
        every OpenAI-compatible server implements it."""
        wants_base64 = body.get("encoding_format") == "base64"
        if wants_base64:
            body, raw = {**body, "encoding_format": "float"}, None
        provider_id, request, requested = await self._route(body, raw)
        metrics, started = current_metrics(), time.perf_counter()
        result = await self._call(provider_id, self.providers[provider_id].embeddings(request), "embeddings", request, requested)
        if metrics is not None or token_meter() is not None:
            await account(result, provider_id, request, "embeddings", metrics, started)
        if wants_base64 or requested is not None:
            return reshaped_embeddings(result, base64_vectors=wants_base64, model=requested)
        return result

    # --- Anthropic's Messages, passed through -------------------------------------------------

    async def passes_messages(self, model: Any) -> bool:
        """Whether `model` is served by a provider that takes Messages requests as they are
        (`MessagesPassthrough`); False for a model not served at all, as for any other."""
        if not self._messages_providers:
            return False
        try:
            entry = await self.resolve(model)
        except APIError:
            return False
        return entry.provider_id in self._messages_providers

    async def messages(self, body: Mapping[str, Any], raw: bytes) -> bytes:
        """The upstream's `Message` JSON for a Messages request (`body`, and `raw`, its bytes),
        forwarded untouched but for the model id where the upstream knows the model by another
        name; the answer as it came, with the client's model id. Traced, metered and counted
        against the quota as a chat completion is."""
        provider_id, request, requested = await self._route(body, raw)
        provider = self._messages_provider(provider_id, body["model"])
        payload = raw if requested is None else renamed(raw, requested, str(request.body["model"]))
        metrics, started = current_metrics(), time.perf_counter()
        result = await self._call(provider_id, provider.messages(payload), "chat", request, requested, usage_of_message)
        if metrics is not None or token_meter() is not None:
            await account_message(result, provider_id, request, metrics, started)
        return result if requested is None else renamed(result, str(request.body["model"]), requested)

    async def stream_messages(self, body: Mapping[str, Any], raw: bytes) -> AsyncIterator[bytes]:
        """The upstream's server-sent events for a streamed Messages request (forwarded as for
        `messages`), one whole event a piece, as they come; message_start's `model` the client's."""
        provider_id, request, requested = await self._route(body, raw)
        provider = self._messages_provider(provider_id, body["model"])
        payload = raw if requested is None else renamed(raw, requested, str(request.body["model"]))
        return metered_events(provider.stream_messages(payload), provider_id, request, requested, current_metrics(), current_tracing(),
                              self.catalog.unreachable)

    async def count_message_tokens(self, body: Mapping[str, Any], raw: bytes) -> bytes | None:
        """The upstream's own count of a Messages request's input tokens, the body forwarded as for
        `messages` (a count is no model call: nothing is metered); None when its provider does
        not count (`MessagesTokenCount`)."""
        provider_id, request, requested = await self._route(body, raw)
        provider = self.providers[provider_id]
        if not isinstance(provider, MessagesTokenCount):
            return None
        payload = raw if requested is None else renamed(raw, requested, str(request.body["model"]))
        return await self._call(provider_id, provider.count_message_tokens(payload), "count_tokens", request, requested)

    def _messages_provider(self, provider_id: str, model: str) -> MessagesPassthrough:
        provider = self.providers[provider_id]
        if not isinstance(provider, MessagesPassthrough):
            raise InvalidRequestError(f"The model '{model}' is not served by an Anthropic Messages upstream (its provider, "
                                      f"'{provider_id}', does not take Messages requests as they are).", param="model",
                                      code="unsupported_model")
        return provider

    async def _call(self, provider_id: str, call: Awaitable[bytes], operation: str, request: UpstreamRequest,
                    requested: str | None = None, usage: Callable[[bytes], Mapping[str, Any]] = usage_counts) -> bytes:
        """`call`, traced; an error that names the model names it as the client did (`requested`,
        where the upstream knows it by another name: `local/smollm2...` is `smollm2...` there)."""
        tracing = current_tracing()
        try:
            if tracing is None:
                return await call
            with tracing.model_call(operation, provider_id, str(request.body.get("model")), request.body) as span:
                result = await call
                tracing.finished(span, usage(result), result)
                return result
        except APIError as error:
            if error.code == "upstream_unreachable":
                self.catalog.unreachable(provider_id, error.message)
            if requested is not None and error.param == "model":
                error.message = error.message.replace(f"'{request.body.get('model')}'", f"'{requested}'")
            raise


@asynccontextmanager
async def open_inference_router(context: ApiContext) -> AsyncIterator[InferenceRouter]:
    store = ChatCompletionStore(context.databases("chat_completions"))
    await store.create_tables()
    router = InferenceRouter(context.providers, context.plan.models, store)
    # A provider that is down must not stop the server: it is reported by /v1/health instead.
    await router.refresh_models()
    log.info("models served: %s", ", ".join(entry.id for entry in router.models()) or "none")
    checks = [asyncio.create_task(served.check_health(), name=f"health checks of {model_id}")
              for model_id, served in router.deployments.items() if served.balancer.routing.health_check_s is not None]
    try:
        yield router
    finally:
        for check in checks:
            check.cancel()
        await asyncio.gather(*checks, return_exceptions=True)
