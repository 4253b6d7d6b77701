"""A model served by several deployments, or with fallbacks: one inference provider in front of
the providers that serve it (docs/deployments.md).

The router sees a provider like any other (`ModelDeployments`, registered under the model's id
as `models:<id>`), so every API that calls a model (chat, completions, embeddings, Responses,
Messages) goes through it, and a model with one provider and no fallbacks does not: its requests
cost what they did. Each request here:

1. Picks a deployment (`balancer.Balancer`) and calls its provider with the upstream's name for
   the model. A failure another deployment may not have (unreachable, a timeout, a 5xx, a 429)
   before anything reached the client (a whole answer, or a stream's first chunk) is retried on
   another deployment: `routing.attempts` in all, none started after `routing.deadline_s`, each
   given up after `routing.first_byte_timeout_s` when set. A stream that breaks after its first
   chunk is never restarted: it ends with an error event, as any stream does. A 429 rests its
   deployment for its `retry-after`.
2. When no deployment answered, tries the model's `fallbacks` in order; when the upstream said the
   prompt exceeds the context window, its `context_window_fallbacks`; when it refused the content,
   its `content_policy_fallbacks`. The answer's `model` is the model that answered.
3. When nothing answered: a 503 naming the model and what each deployment said (a 429 when every
   one was rate limited), with a `retry-after` when a deployment will take requests again.

Nothing is written by an attempt: the stores (stored completions, responses, conversation items)
are written by the caller once, after the answer, whatever the attempts.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from builder.models import ModelConfig
from contract.errors import APIError, InvalidRequestError, ServiceUnavailableError, UpstreamError
from contract.inference.protocol import InferenceProvider, UpstreamModel, UpstreamRequest
from runtime.apis.inference.balancer import Balancer, Deployment, prefix_keys
from runtime.apis.inference.catalog import routed_provider_id
from runtime.apis.inference.upstream import chunks_with_model, with_model
from runtime.http.answered_by import note_deployment
from runtime.observability.metrics import current_metrics, usage_counts
from runtime.observability.tracing import current_tracing

__all__ = ["ModelDeployments", "register"]

_RETRIED = frozenset({408, 429, 500, 502, 503, 504, 529})
_OPERATIONS = {"chat_completion": "chat", "stream_chat_completion": "chat", "completion": "text_completion",
               "stream_completion": "text_completion", "embeddings": "embeddings"}
_CONTEXT_WINDOW = re.compile(r"context[ _](length|window)|maximum context|too many tokens|prompt is too long|input is too long", re.I)
_CONTENT_POLICY = re.compile(r"content[ _](policy|management|filter)|flagged", re.I)

Resolve = Callable[[str], Awaitable[Any]]
"""The catalog's `resolve`: a model id's entry (`provider_id`, `provider_model_id`)."""


class ModelDeployments:
    """See the module's docstring. `providers`: every provider of the router, this one's kind
    included (a fallback may be another model with deployments); `resolve`: the catalog's."""

    def __init__(self, config: ModelConfig, providers: Mapping[str, InferenceProvider], resolve: Resolve,
                 unreachable: Callable[[str, str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.model_id = config.model_id
        self.config = config
        self.balancer = Balancer(config.model_id, config.served_by(), config.routing, clock)
        self.providers = providers
        self.resolve = resolve
        self.unreachable = unreachable
        self._clock = clock

    async def list_models(self) -> list[UpstreamModel]:
        return []  # listed once, as the registered model it is

    # --- the provider's calls -------------------------------------------------------------------

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        return await self._whole(request, "chat_completion")

    async def completion(self, request: UpstreamRequest) -> bytes:
        return await self._whole(request, "completion")

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        return await self._whole(request, "embeddings")

    def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        return self._stream(request, "stream_chat_completion")

    def stream_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        return self._stream(request, "stream_completion")

    async def _whole(self, request: UpstreamRequest, method: str) -> bytes:
        try:
            result, deployment = await self._attempts(request, method, stream=False)
        except APIError as error:
            return await self._fallback(error, request, method)  # type: ignore[no-any-return]
        self.balancer.released(deployment)
        if deployment.tpm is not None:
            self.balancer.used_tokens(deployment, _tokens(result))
        return with_model(result, self.model_id)

    async def _stream(self, request: UpstreamRequest, method: str) -> AsyncIterator[bytes]:
        try:
            (first, rest), deployment = await self._attempts(request, method, stream=True)
        except APIError as error:
            chunks = await self._fallback(error, request, method)
            async for chunk in chunks:
                yield chunk
            return
        try:
            async for chunk in chunks_with_model(_prepend(first, rest), self.model_id, deployment.provider_id):
                if deployment.tpm is not None and b'"usage"' in chunk:  # the last chunk's, when the client asked for it
                    self.balancer.used_tokens(deployment, _tokens(chunk))
                yield chunk
        finally:
            self.balancer.released(deployment)
            await _close(rest)

    # --- attempts -------------------------------------------------------------------------------

    async def _attempts(self, request: UpstreamRequest, method: str, *, stream: bool) -> tuple[Any, Deployment]:
        """The first answer of a deployment (a whole one, or a stream's first chunk and the rest),
        and the deployment, still counted in flight; the failure to raise when none answered."""
        routing = self.balancer.routing
        deadline = self._clock() + routing.deadline_s
        keys = prefix_keys(request.body) if routing.strategy == "prefix_affinity" else ()
        tried: list[Deployment] = []
        failures: list[tuple[Deployment, APIError]] = []
        while len(tried) < routing.attempts:
            deployment = self.balancer.pick(tried, keys)
            if deployment is None:
                if not self._waited(tried, deadline) or not await self._wait(deadline):
                    break
                continue
            tried.append(deployment)
            try:
                answer = await (self._attempt(deployment, request, method, stream) if current_tracing() is None
                                else self._traced(deployment, len(tried), request, method, stream))
            except APIError as error:
                self.balancer.released(deployment)
                self._observe(deployment, _cause(error))
                if not _retried(error):
                    raise
                failures.append((deployment, error))
                if self.balancer.failed(deployment, error.message, _retry_after(error)) and (metrics := current_metrics()) is not None:
                    metrics.deployment_ejections.inc((self.model_id, deployment.name))
                if error.code == "upstream_unreachable":
                    self.unreachable(deployment.provider_id, error.message)
            except BaseException:  # cancelled (the client left), or a bug: no longer in flight either way
                self.balancer.released(deployment)
                raise
            else:
                note_deployment(deployment.name)
                return answer, deployment
            if self._clock() >= deadline:
                break
        raise self._unavailable(failures, tried)

    async def _traced(self, deployment: Deployment, number: int, request: UpstreamRequest, method: str, stream: bool) -> Any:
        """The attempt, in a span of its own naming the deployment and the attempt's number (traces
        on: inside the router's span of the whole call)."""
        tracing = current_tracing()
        assert tracing is not None
        with tracing.model_call(_OPERATIONS.get(method, method), deployment.provider_id, deployment.model, request.body) as span:
            span.set_attribute("stack.deployment", deployment.name)
            span.set_attribute("stack.deployment.attempt", number)
            return await self._attempt(deployment, request, method, stream)

    def _observe(self, deployment: Deployment, outcome: str, first_byte_s: float | None = None) -> None:
        metrics = current_metrics()
        if metrics is not None:
            metrics.deployment_attempts.inc((self.model_id, deployment.name, outcome))
            if first_byte_s is not None:
                metrics.deployment_first_byte_seconds.observe((self.model_id, deployment.name), first_byte_s)

    async def _attempt(self, deployment: Deployment, request: UpstreamRequest, method: str, stream: bool) -> Any:
        provider = self.providers[deployment.provider_id]
        call = getattr(provider, method, None)
        if call is None:
            raise InvalidRequestError(f"The model '{self.model_id}' is not served for this API by its deployment "
                                      f"'{deployment.name}'.", param="model", code="unsupported_model")
        upstream = request if request.body.get("model") == deployment.model else UpstreamRequest({**request.body, "model": deployment.model})
        timeout = self.balancer.routing.first_byte_timeout_s
        began = self._clock()
        try:
            if timeout is None:  # the provider's own timeouts alone (and no timeout's cost: ~1.5 µs)
                answer = await _first(call, upstream, stream) if stream else await call(upstream)
            else:
                async with asyncio.timeout(timeout):
                    answer = await _first(call, upstream, stream)
        except TimeoutError:
            raise APIError(f"deployment '{deployment.name}' gave no first byte within {timeout:g} s", status_code=504,
                           code="upstream_timeout") from None
        first_byte_s = self._clock() - began
        self.balancer.succeeded(deployment, first_byte_s)
        self._observe(deployment, "ok", first_byte_s)
        return answer

    def _waited(self, tried: list[Deployment], deadline: float) -> bool:
        """Whether a request that found no deployment free waits (some are busy at their
        `max_concurrency`, which a request ending frees) rather than fails now (the rest are down)."""
        return self._clock() < deadline and any(
            d not in tried and d.max_concurrency is not None and d.in_flight >= d.max_concurrency and d.state != "open"
            for d in self.balancer.deployments)

    async def _wait(self, deadline: float) -> bool:
        await self.balancer.wait_for_capacity(max(0.0, deadline - self._clock()))
        return self._clock() < deadline

    def _unavailable(self, failures: list[tuple[Deployment, APIError]], tried: list[Deployment]) -> APIError:
        said = "; ".join(f"{d.name}: {error.message}" for d, error in failures) or "every deployment is down or busy"
        opening = self.balancer.next_opening([])
        headers = {"retry-after": str(max(1, round(opening)))} if opening is not None else None
        if not failures and all(self.balancer.over_limits(d) for d in self.balancer.deployments):
            return UpstreamError(f"Every deployment of the model '{self.model_id}' is at its rpm or tpm limit for this minute.",
                                 status_code=429, error_type="rate_limit_error", code="rate_limit_exceeded", headers=headers)
        if failures and all(error.status == 429 for _, error in failures) and len(tried) == len(self.balancer.deployments):
            return UpstreamError(f"Every deployment of the model '{self.model_id}' is rate limited ({said}).", status_code=429,
                                 error_type="rate_limit_error", code="rate_limit_exceeded", headers=headers)
        return ServiceUnavailableError(f"No deployment of the model '{self.model_id}' could answer ({said}).", param="model",
                                       code="deployments_unavailable", headers=headers)

    # --- fallbacks ------------------------------------------------------------------------------

    async def _fallback(self, error: APIError, request: UpstreamRequest, method: str) -> Any:
        """The answer of the first fallback model that answers, for the kind of `error`; `error`
        itself when there is none (or none answers: the last one's error)."""
        reason, models = self._fallbacks_for(error)
        for model in models:
            try:
                entry = await self.resolve(model)
                provider = self.providers[entry.provider_id]
                upstream = UpstreamRequest({**request.body, "model": entry.provider_model_id})
                call = getattr(provider, method)
                if method.startswith("stream_"):
                    rest = aiter(call(upstream))
                    first = await anext(rest, None)
                    answer: Any = chunks_with_model(_prepend(first, rest), model, entry.provider_id)
                else:
                    answer = with_model(await call(upstream), model)
            except APIError as failed:
                error = failed
                continue
            if not isinstance(provider, ModelDeployments):  # a fallback with deployments noted the one that answered
                note_deployment(f"{entry.provider_id}/{entry.provider_model_id}")
            if (metrics := current_metrics()) is not None:
                metrics.fallbacks.inc((self.model_id, model, reason))
            return answer
        raise error

    def _fallbacks_for(self, error: APIError) -> tuple[str, list[str]]:
        """Why a fallback answers, and the models to try, for the failure `error`."""
        config = self.config
        if error.status in (400, 413, 422) and (error.code == "context_length_exceeded" or _CONTEXT_WINDOW.search(error.message)):
            return "context_window", config.context_window_fallbacks
        if error.status in (400, 403) and (error.code in ("content_filter", "content_policy_violation") or _CONTENT_POLICY.search(error.message)):
            return "content_policy", config.content_policy_fallbacks
        # Every deployment failed (a 503 or 429 of ours), or the one there is.
        return "unavailable", config.fallbacks if _retried(error) else []

    async def check_health(self) -> None:
        """Every `routing.health_check_s`, each deployment's provider asked for its models (what
        /v1/models asks an upstream); until cancelled."""
        interval = self.balancer.routing.health_check_s
        assert interval is not None
        while True:
            await asyncio.sleep(interval)
            await asyncio.gather(*(self._check(deployment, min(interval, 10.0)) for deployment in self.balancer.deployments))

    async def _check(self, deployment: Deployment, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.providers[deployment.provider_id].list_models(), timeout)
        except TimeoutError:
            self.balancer.checked(deployment, f"no answer within {timeout:g} s")
        except (APIError, OSError) as error:
            self.balancer.checked(deployment, error.message if isinstance(error, APIError) else str(error))
        else:
            self.balancer.checked(deployment, None)

    def view(self) -> dict[str, Any]:
        """Its deployments' state, for /v1/health."""
        return {**self.balancer.view(), "fallbacks": self.config.fallbacks,
                "context_window_fallbacks": self.config.context_window_fallbacks,
                "content_policy_fallbacks": self.config.content_policy_fallbacks}


def _tokens(answer: bytes) -> int:
    counts = usage_counts(answer)
    return counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)


def _cause(error: APIError) -> str:
    """A failed attempt's outcome, for the metrics."""
    if error.status == 429:
        return "rate_limited"
    if error.code == "upstream_unreachable":
        return "unreachable"
    if error.status in (408, 504):
        return "timeout"
    return "server_error" if error.status >= 500 else "refused"


def _retried(error: APIError) -> bool:
    return error.status in _RETRIED


def _retry_after(error: APIError) -> float | None:
    if error.status != 429:
        return None
    value = error.headers.get("retry-after") or error.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


async def _first(call: Callable[[UpstreamRequest], Any], upstream: UpstreamRequest, stream: bool) -> Any:
    """A whole answer; or a stream's first chunk (None: it had none) and the rest."""
    if not stream:
        return await call(upstream)
    rest = aiter(call(upstream))
    try:
        return await anext(rest), rest
    except StopAsyncIteration:
        return None, rest
    except BaseException:
        await _close(rest)
        raise


async def _prepend(first: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first is not None:
        yield first
    async for chunk in rest:
        yield chunk


async def _close(chunks: AsyncIterator[bytes]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # noqa: BLE001  # a broken stream's close has nothing more to say
            pass


def register(configs: list[ModelConfig], providers: MutableMapping[str, InferenceProvider], resolve: Resolve,
             unreachable: Callable[[str, str], None]) -> dict[str, ModelDeployments]:
    """A `ModelDeployments` for each registered model that needs one, added to `providers` under
    `models:<id>`; the same objects by model id."""
    made: dict[str, ModelDeployments] = {}
    for config in configs:
        if config.routed():
            made[config.model_id] = providers[routed_provider_id(config.model_id)] = ModelDeployments(config, providers, resolve, unreachable)
    return made
