"""What a batches provider implements: OpenAI's Batch API (`client.batches`)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["BATCH_ENDPOINTS", "BatchesProvider"]

BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")
"""The endpoints a batch's requests may go to: every endpoint of the stack that calls a model."""


@runtime_checkable
class BatchesProvider(Protocol):
    """Batches in OpenAI's `Batch` shape. Unknown ids, and other principals' batches, raise NotFoundError."""

    async def create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        """A new batch (`input_file_id`, `endpoint`, `completion_window`, `metadata`, `output_expires_after`),
        `validating`; its requests run in the background."""
        ...

    async def get_batch(self, batch_id: str) -> dict[str, Any]: ...

    async def list_batches(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """The caller's batches, newest first, after the batch `after`; and whether there are more."""
        ...

    async def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        """`cancelling` (or as it is, when it has ended): no new request starts; the finished ones are kept."""
        ...
