"""run.yaml's `models:` entries: a model registered up front, served by one provider or by several
deployments with a routing policy and fallbacks (docs/deployments.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["STRATEGIES", "DeploymentConfig", "ModelConfig", "RoutingConfig"]

STRATEGIES = ("least_outstanding", "round_robin", "latency", "prefix_affinity")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeploymentConfig(_Strict):
    """One deployment of a model: a provider that serves it, under the provider's name for it."""

    provider_id: str = Field(min_length=1)
    provider_model_id: str | None = None
    """The upstream's name for the model; default: the model's `model_id`."""
    weight: float = Field(default=1.0, gt=0)
    """Its share of the requests (round robin), or of the load (the other strategies)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """At most this many requests in flight to it; a request waits for a free deployment within the deadline."""
    rpm: int | None = Field(default=None, ge=1)
    """At most this many requests a minute (in this process) to it; past that, it rests until the minute ends."""
    tpm: int | None = Field(default=None, ge=1)
    """At most this many tokens a minute (in this process; the upstream's usage of each answer) to it."""
    tags: list[str] = Field(default_factory=list)
    """Free-form labels (a region, a hardware class), shown with its state."""


class RoutingConfig(_Strict):
    """How a model's requests are spread over its deployments and retried when one fails."""

    strategy: Literal["least_outstanding", "round_robin", "latency", "prefix_affinity"] = "least_outstanding"
    attempts: int = Field(default=3, ge=1, le=10)
    """Tries of one request across deployments (each on another deployment while one is left)."""
    deadline_s: float = Field(default=60.0, gt=0)
    """No new attempt starts after this long from the request's start."""
    first_byte_timeout_s: float | None = Field(default=None, gt=0)
    """An attempt with no answer (a whole one, or a stream's first chunk) within this long is given up
    and the next tried; default: the provider's own timeouts alone."""
    failures_to_open: int = Field(default=3, ge=1)
    """Consecutive failures that open a deployment's circuit (no requests sent to it for a cooldown)."""
    cooldown_s: float = Field(default=5.0, gt=0)
    """The first cooldown of an opened circuit; it doubles each time a probe after it fails."""
    max_cooldown_s: float = Field(default=300.0, gt=0)
    affinity_imbalance: int = Field(default=8, ge=0)
    """prefix_affinity: a prefix's deployment is kept while it has at most this many requests in flight
    more than the least busy one; past that the request goes to the least busy."""
    prefix_index_size: int = Field(default=100_000, ge=1)
    """prefix_affinity: the prefixes remembered per model and process (least recently used forgotten)."""
    health_check_s: float | None = Field(default=None, gt=0)
    """Ask each deployment's provider for its models this often: a failure counts as a request's
    does (a deployment down is ejected before a request pays for it), an answer closes an open
    circuit. Default: none (a circuit closes by its probe, on live traffic)."""


class ModelConfig(_Strict):
    """A model registered up front, in addition to those the providers report: served by one
    provider (`provider_id`) or by several `deployments`."""

    model_id: str = Field(min_length=1)
    provider_id: str | None = Field(default=None, min_length=1)
    provider_model_id: str | None = None
    model_type: Literal["llm", "embedding"] = "llm"
    metadata: dict[str, Any] = Field(default_factory=dict)
    deployments: list[DeploymentConfig] = Field(default_factory=list)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    fallbacks: list[str] = Field(default_factory=list)
    """Models tried in order when every deployment of this one failed (a connection, a timeout, a 5xx or 429)."""
    context_window_fallbacks: list[str] = Field(default_factory=list)
    """Models tried in order when the upstream says the prompt exceeds the context window."""
    content_policy_fallbacks: list[str] = Field(default_factory=list)
    """Models tried in order when the upstream refuses the content under its policy."""

    @model_validator(mode="after")
    def _served(self) -> ModelConfig:
        if self.deployments and (self.provider_id is not None or self.provider_model_id is not None):
            raise ValueError("give either provider_id (and provider_model_id) or deployments, not both")
        if not self.deployments and self.provider_id is None:
            raise ValueError("provider_id or deployments is required")
        return self

    def served_by(self) -> list[DeploymentConfig]:
        """Its deployments: the one provider it names, or its `deployments`."""
        if self.provider_id is not None:
            return [DeploymentConfig(provider_id=self.provider_id, provider_model_id=self.provider_model_id)]
        return self.deployments

    def routed(self) -> bool:
        """Whether its requests go through the deployments layer (runtime.apis.inference.deployments):
        it has several deployments, or fallbacks. One provider and no fallbacks: called directly."""
        return len(self.served_by()) > 1 or bool(self.every_fallback())

    def every_fallback(self) -> list[str]:
        return [*self.fallbacks, *self.context_window_fallbacks, *self.content_policy_fallbacks]
