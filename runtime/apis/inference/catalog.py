"""The models the stack serves, and which provider serves each: what the providers report (refreshed
every minute, and once more before an unknown id is a 404), plus run.yaml's `models:` entries.

Model ids are `provider_id/model` for every model a provider reports, the bare model name where
exactly one provider serves it, and each `models:` entry of run.yaml under its own `model_id`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from builder.config import ModelConfig
from contract.errors import APIError, InvalidRequestError, NotFoundError
from contract.inference.protocol import InferenceProvider, UpstreamModel

__all__ = ["ModelCatalog", "ModelEntry", "ProviderState", "routed_provider_id"]

log = logging.getLogger("stack")

REFRESH_TIMEOUT_S = 10.0
MISS_REFRESH_INTERVAL_S = 5.0
LIST_REFRESH_INTERVAL_S = 60.0


def routed_provider_id(model_id: str) -> str:
    """The provider id of a model served through its deployments (runtime.apis.inference.deployments)."""
    return f"models:{model_id}"


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


class ModelCatalog:
    """The models of a stack's inference providers, by the ids clients use."""

    def __init__(self, providers: Mapping[str, InferenceProvider], registered: Sequence[ModelConfig]) -> None:
        self.providers = dict(providers)
        self.registered = tuple(registered)
        self.states = {provider_id: ProviderState() for provider_id in providers}
        self._models: dict[str, ModelEntry] = {}
        self._aliases: dict[str, ModelEntry] = {}
        self._last_refresh = 0.0
        self._refresh_lock = asyncio.Lock()

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
            if config.routed():  # the deployments layer, which calls each deployment by its own name for the model
                first = config.served_by()[0].provider_id
                models[config.model_id] = ModelEntry(config.model_id, routed_provider_id(config.model_id), config.model_id,
                                                     config.model_type, 0, first, order=order.get(first, 0))
                continue
            provider_id = str(config.provider_id)
            upstream = config.provider_model_id or config.model_id
            models[config.model_id] = ModelEntry(config.model_id, provider_id, upstream, config.model_type, 0, provider_id,
                                                 order=order.get(provider_id, 0))
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
        entry = self.lookup(model_id)
        if entry is None and time.monotonic() - self._last_refresh > MISS_REFRESH_INTERVAL_S:
            await self.refresh_models()
            entry = self.lookup(model_id)
        if entry is None:
            available = ", ".join(entry.id for entry in self.models()) or "none (no provider reported a model)"
            raise NotFoundError(
                f"The model '{model_id}' does not exist or is not served here. Available models: {available}",
                param="model", code="model_not_found",
            )
        return entry

    def lookup(self, model_id: str) -> ModelEntry | None:
        entry = self._models.get(model_id) or self._aliases.get(model_id)
        if entry is None and "/" in model_id:
            # `provider_id/model` for a model the provider serves but did not list (e.g. a new upstream model).
            provider_id, _, name = model_id.partition("/")
            if provider_id in self.providers:
                entry = ModelEntry(model_id, provider_id, name, "llm", 0, provider_id)
        return entry

    def unreachable(self, provider_id: str, detail: str) -> None:
        """A call found the provider unreachable: /v1/health says so until its next refresh."""
        state = self.states.get(provider_id)  # a model's deployments layer is no provider of its own to mark
        if state is not None:
            state.status, state.detail = "unavailable", detail

    def health(self) -> dict[str, dict[str, Any]]:
        return {pid: {"status": state.status, "detail": state.detail, "models": state.models} for pid, state in self.states.items()}


def _describe(error: BaseException) -> str:
    if isinstance(error, APIError):
        return error.message
    if isinstance(error, TimeoutError):
        return f"no answer within {REFRESH_TIMEOUT_S:.0f} s"
    return f"{type(error).__name__}: {error}"
