"""What a responses provider implements (the built-in one runs over the inference API)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from contract.responses.models import CompactRequest, CreateResponse

__all__ = ["ResponsesProvider"]


@runtime_checkable
class ResponsesProvider(Protocol):
    """Responses are dicts in the OpenAI `Response` shape; events are dicts of the
    `ResponseStreamEvent` union, numbered by `sequence_number`. Client mistakes raise
    `contract.errors.APIError`s before anything is streamed."""

    async def create_response(self, request: CreateResponse) -> dict[str, Any]: ...

    async def stream_response(self, request: CreateResponse) -> AsyncIterator[dict[str, Any]]: ...

    async def compact_response(self, request: CompactRequest) -> dict[str, Any]:
        """A `response.compaction`: the context's user messages and one sealed `compaction` item."""
        ...

    async def get_response(self, response_id: str) -> dict[str, Any]: ...

    async def stream_stored_response(self, response_id: str, starting_after: int | None) -> AsyncIterator[dict[str, Any]]: ...

    async def delete_response(self, response_id: str) -> dict[str, Any]: ...

    async def list_responses(self, after: str | None, limit: int, order: str) -> dict[str, Any]: ...

    async def list_input_items(self, response_id: str, after: str | None, limit: int, order: str) -> dict[str, Any]: ...

    async def cancel_response(self, response_id: str) -> dict[str, Any]: ...

    async def count_input_tokens(self, request: CreateResponse) -> dict[str, Any]: ...
