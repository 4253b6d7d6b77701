"""`GET /v1/models` as Anthropic's clients read it (the request carries `anthropic-version`):
`{"data": [{"type": "model", "id", "display_name", "created_at"}], "has_more", "first_id",
"last_id"}`, every model on one page."""

from __future__ import annotations

import datetime
from typing import Any

from runtime.apis.inference.catalog import ModelEntry

__all__ = ["anthropic_model", "anthropic_models_page"]


def anthropic_model(entry: ModelEntry) -> dict[str, Any]:
    created = datetime.datetime.fromtimestamp(entry.created or 0, datetime.timezone.utc)
    return {"type": "model", "id": entry.id, "display_name": entry.id, "created_at": created.isoformat().replace("+00:00", "Z")}


def anthropic_models_page(models: list[dict[str, Any]]) -> dict[str, Any]:
    return {"data": models, "has_more": False, "first_id": models[0]["id"] if models else None,
            "last_id": models[-1]["id"] if models else None}
