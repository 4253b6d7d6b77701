"""The `anthropic` inference provider's config: where the Messages API is, how to call it, and the
defaults the translation from chat completions needs (Anthropic requires `max_tokens`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["AnthropicConfig", "ThinkingBudgets"]


class ThinkingBudgets(BaseModel):
    """The thinking budget (tokens) each `reasoning_effort` asks for (`thinking: budget`)."""

    model_config = ConfigDict(extra="forbid")

    minimal: int = Field(default=1024, ge=1024)
    low: int = Field(default=2048, ge=1024)
    medium: int = Field(default=8192, ge=1024)
    high: int = Field(default=16384, ge=1024)
    xhigh: int = Field(default=32000, ge=1024)


class AnthropicConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_key: SecretStr | None = Field(default=None, description="Sent as `x-api-key`")
    base_url: str = Field(default="https://api.anthropic.com", min_length=1, description=(
        "The Messages API's base URL, with or without its `/v1` (requests go to <base>/v1/messages)"))
    anthropic_version: str = Field(default="2023-06-01", min_length=1, description="The `anthropic-version` header")
    beta: list[str] = Field(default_factory=list, description="Sent as the `anthropic-beta` header, comma-separated")
    max_tokens: int = Field(default=4096, ge=1, description=(
        "The output cap of a request that sets none (`max_tokens`, `max_completion_tokens`): Anthropic requires one"))
    cache: Literal["off", "auto"] = Field(default="off", description=(
        "`auto`: prompt-cache breakpoints on the tools, the system prompt and the last user turns (at most 4 in all)"))
    thinking: Literal["budget", "adaptive"] = Field(default="budget", description=(
        "How `reasoning_effort` turns thinking on: `budget` (thinking enabled with the effort's budget_tokens) or "
        "`adaptive` (thinking adaptive, the effort in output_config, for the models that take it)"))
    thinking_budgets: ThinkingBudgets = Field(default_factory=ThinkingBudgets)
    thinking_memory_mb: float = Field(default=64.0, ge=0, description=(
        "Thinking blocks (and their signatures) kept in memory, so that a chain that hands back only the "
        "reasoning text (Responses) gives Claude its signed blocks again; 0 keeps none"))
    models: list[str] | None = Field(default=None, description=(
        "The models to list, instead of asking the upstream's GET /v1/models (for a server that lacks it)"))
    timeout_s: float = Field(default=300.0, gt=0, description=(
        "Longest wait for an answer, or for a stream's first event: a model may think long"))
    stream_gap_timeout_s: float = Field(default=30.0, gt=0, description=(
        "Longest wait between two events of a stream once it has started"))
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=256, ge=1)
    headers: dict[str, str] = Field(default_factory=dict, description="Extra headers sent upstream")
