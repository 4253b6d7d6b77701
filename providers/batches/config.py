"""The built-in batches provider's settings (run.yaml's `config:` of a `batches` provider)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BuiltinBatchesConfig"]


class BuiltinBatchesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(default=8, ge=1, description="requests of one batch under way at once")
    max_concurrency: int = Field(default=16, ge=1, description="requests of all batches under way at once in one process")
    beside_live: int = Field(default=1, ge=1, description=(
        "requests of all batches under way in one process while interactive requests are in flight: batches give way to them"))
    beside_live_interval_s: float = Field(default=0.01, ge=0, description=(
        "while interactive requests are in flight, a batch request starts at most this often (in one process)"))
    attempts: int = Field(default=5, ge=1, description="tries of a request that meets a 429 or 5xx, with backoff, within the window")
    lease_s: float = Field(default=30.0, gt=0, description="a batch whose runner renewed its lease no longer than this ago is left to it")
    max_requests: int = Field(default=50_000, ge=1, description="requests in one batch's file (OpenAI's limit)")
    window_s: float | None = Field(default=None, gt=0, description=(
        "the completion window's length, in place of the one asked (24h): for tests of expiry"))
