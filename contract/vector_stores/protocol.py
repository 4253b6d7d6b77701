"""What a vector stores provider implements.

Objects are plain dicts in the OpenAI shapes (`VectorStore`, `VectorStoreFile`,
`VectorStoreFileBatch`). Unknown or deleted ids raise `NotFoundError`; request bodies arrive
checked (contract.vector_stores.models). `file_counts`, `usage_bytes` and `status` are read
from the data each time, never kept as counters that can drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from contract.vector_stores.models import CreateBatch, CreateStore, FileSpec, Search, UpdateStore

__all__ = ["FILE_STATUSES", "Page", "SearchHit", "VectorStoresProvider"]

FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


@dataclass(frozen=True)
class Page:
    """A cursor page request: objects after (or before) an id, newest first unless `order` is asc."""

    limit: int = 20
    order: str = "desc"
    after: str | None = None
    before: str | None = None


@dataclass(frozen=True)
class SearchHit:
    """One chunk found: the OpenAI search result, plus where it comes from."""

    vector_store_id: str
    file_id: str
    filename: str
    score: float
    text: str
    attributes: Mapping[str, Any]

    def public(self) -> dict[str, Any]:
        """As `POST /v1/vector_stores/{id}/search` lists it."""
        return {"file_id": self.file_id, "filename": self.filename, "score": self.score, "attributes": dict(self.attributes),
                "content": [{"type": "text", "text": self.text}]}


@runtime_checkable
class VectorStoresProvider(Protocol):
    async def create_store(self, request: CreateStore) -> dict[str, Any]: ...

    async def list_stores(self, page: Page) -> tuple[list[dict[str, Any]], bool]: ...

    async def get_store(self, store_id: str) -> dict[str, Any]: ...

    async def update_store(self, store_id: str, request: UpdateStore) -> dict[str, Any]: ...

    async def delete_store(self, store_id: str) -> dict[str, Any]:
        """Delete the store, its files' chunks and vectors (the files themselves stay)."""

    async def attach_file(self, store_id: str, spec: FileSpec) -> dict[str, Any]:
        """Add a file (a Files API id) to the store: it is `in_progress` until ingested, then
        `completed`, or `failed` with `last_error` saying why. Attaching it again replaces it."""

    async def list_files(self, store_id: str, status: str | None, page: Page, batch_id: str | None = None) -> tuple[list[dict[str, Any]], bool]: ...

    async def get_file(self, store_id: str, file_id: str) -> dict[str, Any]: ...

    async def update_file(self, store_id: str, file_id: str, attributes: dict[str, Any] | None) -> dict[str, Any]: ...

    async def detach_file(self, store_id: str, file_id: str) -> dict[str, Any]: ...

    async def forget_file(self, file_id: str) -> None:
        """Remove the file from every store that holds it, whoever's stores they are: the Files
        API is deleting it (OpenAI: "Delete a file and remove it from all vector stores"), and its
        text must not stay searchable. A file no store holds is no error."""

    async def file_content(self, store_id: str, file_id: str) -> list[str]:
        """The text of the file's chunks, in order."""

    async def create_batch(self, store_id: str, request: CreateBatch) -> dict[str, Any]: ...

    async def get_batch(self, store_id: str, batch_id: str) -> dict[str, Any]: ...

    async def cancel_batch(self, store_id: str, batch_id: str) -> dict[str, Any]: ...

    async def search(self, store_ids: Sequence[str], request: Search) -> list[SearchHit]:
        """The best chunks for the request's queries over the stores, best first (at most
        `max_num_results`, none scoring under the threshold). Unknown stores are a NotFoundError."""
