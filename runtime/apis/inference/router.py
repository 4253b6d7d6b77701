"""The inference API's implementation: picks a provider per request by model, stores completions.

Model ids are `provider_id/model` for every model a provider reports, the bare model name where
exactly one provider serves it, and each `models:` entry of run.yaml under its own `model_id`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from builder.config import ModelConfig
from runtime import fastjson
from runtime.apis.inference.chunks import ChunkAccumulator, upstream_shape
from runtime.apis.inference.guarded import guard_completion, guard_stream, guard_text_completion
from runtime.apis.inference.protocol import InferenceProvider, TextCompletionProvider, UpstreamModel, UpstreamRequest
from runtime.apis.inference.store import ChatCompletionStore, new_completion_id
from runtime.apis.safety.protocol import SafetyProvider
from runtime.errors import APIError, InvalidRequestError, NotFoundError, UpstreamError
from runtime.metrics import Metrics, current_metrics, usage_counts
from runtime.tracing import Tracing, current_tracing
from runtime.quotas import spend_tokens, token_meter

if TYPE_CHECKING:
    from runtime.apis import ApiContext

__all__ = ["InferenceRouter", "ModelEntry", "open_inference_router"]

log = logging.getLogger("stack")

REFRESH_TIMEOUT_S = 10.0
MISS_REFRESH_INTERVAL_S = 5.0
LIST_REFRESH_INTERVAL_S = 60.0


@dataclass(frozen=True)
class ModelEntry:
    id: str
    provider_id: str
    provider_model_id: str
    model_type: str
    created: int
    owned_by: str
    dimensions: int | None = None
    order: int = 0
    """The provider's place in run.yaml: models are listed provider by provider."""

    def public(self) -> dict[str, Any]:
        # `custom_metadata` as OGX lists it: its clients and tests read a model's type and provider there.
        metadata: dict[str, Any] = {"model_type": self.model_type, "provider_id": self.provider_id,
                                    "provider_resource_id": self.provider_model_id}
        entry = {"id": self.id, "object": "model", "created": self.created, "owned_by": self.owned_by, "custom_metadata": metadata}
        if self.dimensions is not None:
            entry["dimensions"] = metadata["embedding_dimension"] = self.dimensions
        return entry


@dataclass
class ProviderState:
    """What the router last saw of a provider, for /v1/health."""

    status: str = "unknown"
    detail: str | None = None
    models: int = 0


class InferenceRouter:
    """Routes chat completions, legacy completions and embeddings to the provider serving the requested model."""

    def __init__(self, providers: Mapping[str, InferenceProvider], registered: Sequence[ModelConfig], store: ChatCompletionStore) -> None:
        self.providers = dict(providers)
        self.registered = tuple(registered)
        self.store = store
        self.states = {provider_id: ProviderState() for provider_id in providers}
        self._models: dict[str, ModelEntry] = {}
        self._aliases: dict[str, ModelEntry] = {}
        self._last_refresh = 0.0
        self._refresh_lock = asyncio.Lock()

    # --- models -------------------------------------------------------------------------

    async def refresh_models(self) -> None:
        """Ask every provider for its models; a provider that fails keeps no models until the next refresh."""
        async with self._refresh_lock:
            reported = await asyncio.gather(*(self._provider_models(pid) for pid in self.providers))
            self._rebuild(dict(zip(self.providers, reported, strict=True)))
            self._last_refresh = time.monotonic()

    async def _provider_models(self, provider_id: str) -> list[UpstreamModel]:
        state = self.states[provider_id]
        try:
            models = await asyncio.wait_for(self.providers[provider_id].list_models(), REFRESH_TIMEOUT_S)
        except (APIError, TimeoutError, OSError) as error:
            state.status, state.detail = "unavailable", _describe(error)
            log.warning("inference provider %s: cannot list models: %s", provider_id, state.detail)
            return []
        state.status, state.detail, state.models = "ok", None, len(models)
        return models

    def _rebuild(self, reported: Mapping[str, list[UpstreamModel]]) -> None:
        models: dict[str, ModelEntry] = {}
        by_name: dict[str, list[ModelEntry]] = {}
        order = {provider_id: index for index, provider_id in enumerate(self.providers)}
        for provider_id, provider_models in reported.items():
            for model in provider_models:
                entry = ModelEntry(f"{provider_id}/{model.id}", provider_id, model.id, model.model_type, model.created,
                                   model.owned_by or provider_id, model.dimensions, order[provider_id])
                models[entry.id] = entry
                by_name.setdefault(model.id, []).append(entry)
        for config in self.registered:
            upstream = config.provider_model_id or config.model_id
            models[config.model_id] = ModelEntry(config.model_id, config.provider_id, upstream, config.model_type, 0, config.provider_id,
                                                 order=order.get(config.provider_id, 0))
        self._models = models
        self._aliases = {name: entries[0] for name, entries in by_name.items() if len(entries) == 1 and name not in models}

    async def refresh_if_stale(self) -> None:
        if time.monotonic() - self._last_refresh > LIST_REFRESH_INTERVAL_S:
            await self.refresh_models()

    def models(self) -> list[ModelEntry]:
        """Provider by provider, in run.yaml's order (remote providers first in the starter), then by id."""
        return sorted(self._models.values(), key=lambda entry: (entry.order, entry.id))

    async def resolve(self, model_id: Any) -> ModelEntry:
        """The entry serving `model_id`; an unknown id triggers one refresh (rate-limited) before a 404."""
        if not isinstance(model_id, str) or not model_id:
            raise InvalidRequestError("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
        entry = self._lookup(model_id)
        if entry is None and time.monotonic() - self._last_refresh > MISS_REFRESH_INTERVAL_S:
            await self.refresh_models()
            entry = self._lookup(model_id)
        if entry is None:
            available = ", ".join(entry.id for entry in self.models()) or "none (no provider reported a model)"
            raise NotFoundError(
                f"The model '{model_id}' does not exist or is not served here. Available models: {available}",
                param="model", code="model_not_found",
            )
        return entry

    def _lookup(self, model_id: str) -> ModelEntry | None:
        entry = self._models.get(model_id) or self._aliases.get(model_id)
        if entry is None and "/" in model_id:
            # `provider_id/model` for a model the provider serves but did not list (e.g. a new upstream model).
            provider_id, _, name = model_id.partition("/")
            if provider_id in self.providers:
                entry = ModelEntry(model_id, provider_id, name, "llm", 0, provider_id)
        return entry

    async def _route(self, body: Mapping[str, Any], raw: bytes | None) -> tuple[str, UpstreamRequest, str | None]:
        """The provider, the request for it, and the client's model id when the upstream knows
        the model by another name (`provider_id/model`, an alias): answers carry the client's id."""
        entry = await self.resolve(body.get("model"))
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
        result = await self._call(provider_id, self.providers[provider_id].chat_completion(request), "chat", request)
        if result[:1] != b"{" or result.rstrip()[-1:] != b"}":  # a body cut short (the bytes are passed on unparsed)
            raise _malformed(provider_id, result)
        if metrics is not None or token_meter() is not None:  # the usage is read (only then)
            await _account(result, provider_id, request, "chat", metrics, started)
        if body.get("store") is not True and guard is None:
            return _with_model(result, requested) if requested is not None and echo_model else result
        completion = _completion(result, provider_id)
        if guard is not None:
            await guard_completion(guard, completion)
        if requested is not None:
            completion["model"] = requested
        if body.get("store") is True:
            upstream_id = completion.get("id")
            completion["id"] = new_completion_id()
            await self.store.save(completion, list(body.get("messages") or ()), body.get("metadata"), _text_or_none(upstream_id))
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
        body, raw, hidden_usage = _asking_usage(body, raw) if watched else (body, raw, False)
        provider_id, request, requested = await self._route(body, raw)
        chunks = self.providers[provider_id].stream_chat_completion(request)
        if watched:
            chunks = _metered(chunks, hidden_usage, metrics, provider_id, request, tracing)
        if body.get("store") is True or guard is not None:
            return self._rewritten_stream(chunks, body, requested, provider_id, guard)
        if requested is not None and echo_model:
            chunks = _chunks_with_model(chunks, requested, provider_id)
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
                chunk = _chunk(raw, provider_id)
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
            await self.store.save(completion, list(body.get("messages") or ()), body.get("metadata"), _text_or_none(upstream_id))

    # --- legacy completions -----------------------------------------------------------------

    async def text_completion(self, body: Mapping[str, Any], raw: bytes | None = None, *, guard: SafetyProvider | None = None) -> bytes:
        """The upstream's Completion JSON (`/v1/completions`), with the client's model id; with a
        `guard`, each choice's text passes the output guardrail first."""
        provider_id, request, requested = await self._route(body, raw)
        provider = self._text_provider(provider_id, body["model"])
        metrics, started = current_metrics(), time.perf_counter()
        result = await self._call(provider_id, provider.completion(request), "text_completion", request)
        if result[:1] != b"{" or result.rstrip()[-1:] != b"}":
            raise _malformed(provider_id, result)
        if metrics is not None or token_meter() is not None:
            await _account(result, provider_id, request, "text_completion", metrics, started)
        if guard is None:
            return _with_model(result, requested) if requested is not None else result
        completion = _completion(result, provider_id)
        await guard_text_completion(guard, completion)
        if requested is not None:
            completion["model"] = requested
        return fastjson.dumps(completion)

    async def stream_text_completion(self, body: Mapping[str, Any], raw: bytes | None = None, *,
                                     guard: SafetyProvider | None = None) -> AsyncIterator[bytes]:
        """The upstream's Completion chunk payloads, with the client's model id (as for chat)."""
        metrics, tracing = current_metrics(), current_tracing()
        watched = token_meter() is not None or metrics is not None or tracing is not None
        body, raw, hidden_usage = _asking_usage(body, raw) if watched else (body, raw, False)
        provider_id, request, requested = await self._route(body, raw)
        chunks = self._text_provider(provider_id, body["model"]).stream_completion(request)
        if watched:
            chunks = _metered(chunks, hidden_usage, metrics, provider_id, request, tracing, "text_completion")
        if guard is not None:
            return self._guarded_text_stream(chunks, body, requested, provider_id, guard)
        if requested is not None:
            chunks = _chunks_with_model(chunks, requested, provider_id)
        return chunks

    async def _guarded_text_stream(self, chunks: AsyncIterator[bytes], body: Mapping[str, Any], model: str | None, provider_id: str,
                                   guard: SafetyProvider) -> AsyncIterator[bytes]:
        async def parsed() -> AsyncIterator[dict[str, Any]]:
            async for raw in chunks:
                chunk = _chunk(raw, provider_id)
                if model is not None:
                    chunk["model"] = model
                yield chunk

        async for chunk in guard_stream(guard, parsed(), text_completion_choices(body), text_completion=True):
            yield fastjson.dumps(chunk)

    def _text_provider(self, provider_id: str, model: str) -> TextCompletionProvider:
        provider = self.providers[provider_id]
        if isinstance(provider, TextCompletionProvider):
            return provider
        entry = self._lookup(model)
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
        result = await self._call(provider_id, self.providers[provider_id].embeddings(request), "embeddings", request)
        if metrics is not None or token_meter() is not None:
            await _account(result, provider_id, request, "embeddings", metrics, started)
        if wants_base64 or requested is not None:
            return _reshaped_embeddings(result, base64_vectors=wants_base64, model=requested)
        return result

    async def _call(self, provider_id: str, call: Awaitable[bytes], operation: str, request: UpstreamRequest) -> bytes:
        tracing = current_tracing()
        try:
            if tracing is None:
                return await call
            with tracing.model_call(operation, provider_id, str(request.body.get("model")), request.body) as span:
                result = await call
                tracing.finished(span, usage_counts(result), result)
                return result
        except APIError as error:
            if error.code == "upstream_unreachable":
                self.states[provider_id].status, self.states[provider_id].detail = "unavailable", error.message
            raise

    def health(self) -> dict[str, dict[str, Any]]:
        return {pid: {"status": state.status, "detail": state.detail, "models": state.models} for pid, state in self.states.items()}


def _asking_usage(body: Mapping[str, Any], raw: bytes | None) -> tuple[Mapping[str, Any], bytes | None, bool]:
    """A stream's request with the upstream asked for usage (quotas, metrics and traces count its
    tokens), and whether the client did not ask for it (its usage chunk is then kept from it)."""
    if (body.get("stream_options") or {}).get("include_usage"):
        return body, raw, False
    return {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}, None, True


def text_completion_choices(body: Mapping[str, Any]) -> int:
    """How many choices a completions request asks for: `n` for each of its prompts."""
    prompt, n = body.get("prompt"), body.get("n")
    prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    return prompts * (n if isinstance(n, int) and n > 0 else 1)


def _reshaped_embeddings(result: bytes, *, base64_vectors: bool, model: str | None) -> bytes:
    document = fastjson.loads(result)
    if base64_vectors:
        for item in document.get("data") or ():
            vector = item.get("embedding")
            if isinstance(vector, list):
                item["embedding"] = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    if model is not None and isinstance(document, dict):
        document["model"] = model
    return fastjson.dumps(document)


def _with_model(result: bytes, model: str) -> bytes:
    document = fastjson.loads(result)
    if not isinstance(document, dict):
        return result
    document["model"] = model
    return fastjson.dumps(document)


def _completion(result: bytes, provider_id: str) -> dict[str, Any]:
    try:
        completion = fastjson.loads(result)
    except ValueError:
        completion = None
    if not isinstance(completion, dict):
        raise _malformed(provider_id, result)
    return completion


def _chunk(raw: bytes, provider_id: str) -> dict[str, Any]:
    """A stream chunk as an object; a malformed one is the upstream's error (the client gets an
    error event and a clean end, not a cut connection)."""
    try:
        chunk = fastjson.loads(raw)
    except ValueError:
        raise _malformed(provider_id, raw) from None
    if not isinstance(chunk, dict):
        raise _malformed(provider_id, raw)
    return chunk


async def _account(result: bytes, provider_id: str, request: UpstreamRequest, kind: str, metrics: Metrics | None,
                   started: float) -> None:
    """A whole answer's timing and tokens in the metrics, and its usage against the request's quota."""
    if metrics is not None:
        metrics.call_done(provider_id, str(request.body.get("model")), kind, time.perf_counter() - started, result)
    if token_meter() is not None:
        await spend_tokens(usage_counts(result))


async def _metered(chunks: AsyncIterator[bytes], hide_usage: bool, metrics: Metrics | None, provider: str, request: UpstreamRequest,
                   tracing: Tracing | None, kind: str = "chat") -> AsyncIterator[bytes]:
    """The chunks, with the tokens of the usage chunk recorded against the request's quota and in
    the metrics (that chunk left out when only they asked for it), the stream's timings, and its
    model call span."""
    model = str(request.body.get("model"))
    started = time.perf_counter()
    first = True
    span = tracing.start_model_call(kind, provider, model, request.body) if tracing is not None else None
    try:
        finish: list[bytes] = []
        async for raw in chunks:
            if first and metrics is not None:
                metrics.first_token_seconds.observe((provider, model), time.perf_counter() - started)
            first = False
            if tracing is not None and b'"finish_reason":"' in raw:
                finish.append(raw)
            if b'"usage"' in raw:  # a bytes scan: only the chunk that carries usage is parsed
                try:
                    chunk = fastjson.loads(raw)
                except ValueError:
                    chunk = None
                if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                    await spend_tokens(chunk["usage"])
                    if metrics is not None:
                        metrics.record_usage(provider, model, chunk["usage"])
                    if tracing is not None:
                        tracing.finished(span, chunk["usage"])
                    if hide_usage and not chunk.get("choices"):
                        continue
            yield raw
        if tracing is not None:
            tracing.finished(span, {}, b"".join(finish))
    finally:
        if span is not None:
            span.end()
    if metrics is not None:
        metrics.upstream_seconds.observe((provider, model, kind), time.perf_counter() - started)


async def _chunks_with_model(chunks: AsyncIterator[bytes], model: str, provider_id: str) -> AsyncIterator[bytes]:
    async for raw in chunks:
        chunk = _chunk(raw, provider_id)
        chunk["model"] = model
        yield fastjson.dumps(chunk)


def _malformed(provider: str, body: bytes) -> UpstreamError:
    return UpstreamError(f"The model server ({provider}) answered with malformed data, not a JSON object: {body[:120]!r}",
                         status_code=502, code="upstream_malformed")


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _describe(error: BaseException) -> str:
    if isinstance(error, APIError):
        return error.message
    if isinstance(error, TimeoutError):
        return f"no answer within {REFRESH_TIMEOUT_S:.0f} s"
    return f"{type(error).__name__}: {error}"


@asynccontextmanager
async def open_inference_router(context: ApiContext) -> AsyncIterator[InferenceRouter]:
    store = ChatCompletionStore(context.databases("chat_completions"))
    await store.create_tables()
    router = InferenceRouter(context.providers, context.plan.models, store)
    # A provider that is down must not stop the server: it is reported by /v1/health instead.
    await router.refresh_models()
    log.info("models served: %s", ", ".join(entry.id for entry in router.models()) or "none")
    yield router
