"""A vector store's and an attached file's rows as the service writes them, and as the API answers
them (OpenAI's `vector_store` and `vector_store.file` objects)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from contract.ids import random_hex
from contract.vector_stores.models import FileSpec
from contract.vector_stores.protocol import FILE_STATUSES

__all__ = ["DAY_S", "expires_at", "file_counts", "file_row", "public_file", "public_store"]

DAY_S = 86_400


def file_row(store_id: str, spec: FileSpec, file_object: Mapping[str, Any], now: int, batch_id: str | None) -> dict[str, Any]:
    """The row of a file attached now (a new ingestion attempt, in progress)."""
    expires_at = file_object.get("expires_at")
    return {"vector_store_id": store_id, "file_id": spec.file_id, "filename": str(file_object["filename"]), "created_at": now,
            "status": "in_progress", "last_error": None, "usage_bytes": 0, "attributes": spec.attributes or {},
            "chunk_tokens": spec.chunking.max_tokens, "overlap_tokens": spec.chunking.overlap_tokens, "batch_id": batch_id,
            "attempt": random_hex(12), "lease_owner": None, "lease_until": None,
            "file_expires_at": expires_at if isinstance(expires_at, int) else None}


def file_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """OpenAI's `file_counts`: every status, and their total."""
    by_status = {status: int(counts.get(status, 0)) for status in FILE_STATUSES}
    return {**by_status, "total": sum(by_status.values())}


def expires_at(row: Any) -> int | None:
    """When a store expires: `expires_after_days` after it was last active (None: never)."""
    days = row["expires_after_days"]
    return int(row["last_active_at"]) + int(days) * DAY_S if days else None


def public_store(row: Any, counts: Mapping[str, int]) -> dict[str, Any]:
    """A store's row as the API answers it, with its files' `counts` by status (and `usage_bytes`)."""
    expires = expires_at(row)
    status = ("expired" if expires is not None and expires <= time.time()
              else "in_progress" if counts.get("in_progress") else "completed")
    return {"id": row["id"], "object": "vector_store", "created_at": row["created_at"], "name": row["name"],
            "description": row["description"], "usage_bytes": int(counts.get("usage_bytes", 0)), "file_counts": file_counts(counts),
            "status": status, "expires_after": {"anchor": "last_active_at", "days": row["expires_after_days"]} if row["expires_after_days"] else None,
            "expires_at": expires, "last_active_at": row["last_active_at"], "metadata": row["metadata"] or {}}


def public_file(row: Any) -> dict[str, Any]:
    """An attached file's row as the API answers it."""
    return {"id": row["file_id"], "object": "vector_store.file", "created_at": row["created_at"], "vector_store_id": row["vector_store_id"],
            "status": row["status"], "last_error": row["last_error"], "usage_bytes": row["usage_bytes"],
            "attributes": row["attributes"] or {},
            "chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": row["chunk_tokens"],
                                                                "chunk_overlap_tokens": row["overlap_tokens"]}}}
