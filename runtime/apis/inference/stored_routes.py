"""Routes of stored chat completions (`store: true`): list, get, update their metadata, delete,
and list a completion's input messages."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from contract.checks import cursor_page, parse_json_object, validate_limit, validate_metadata, validate_order
from contract.errors import InvalidRequestError
from runtime.apis.common import METADATA_SCHEMA, JSONBytes, json_body
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

if TYPE_CHECKING:
    from runtime.apis.inference.router import InferenceRouter

__all__ = ["CHAT_LIST_MAX", "add_stored_routes"]

# OpenAI documents no maximum `limit` for stored chat completions (clients ask for 1,000).
CHAT_LIST_MAX = 1000


def add_stored_routes(routes: Routes, impl: InferenceRouter) -> None:
    """The stored chat completions' routes, on `routes`."""

    @routes.get("/chat/completions", summary="List stored chat completions")
    async def list_chat_completions(
        request: Request, after: str | None = None, limit: int = 20, order: str = "asc", model: str | None = None
    ) -> Response:
        metadata = _metadata_filter(request)
        data, has_more = await impl.store.page(
            after=after, limit=validate_limit(limit, CHAT_LIST_MAX), order=validate_order(order), model=model, metadata=metadata
        )
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/chat/completions/{completion_id}", summary="Get a stored chat completion")
    async def get_chat_completion(completion_id: str) -> Response:
        return JSONBytes(await impl.store.get(completion_id))

    @routes.post("/chat/completions/{completion_id}", summary="Update a stored chat completion's metadata",
                 openapi_extra=json_body(["metadata"], {"metadata": METADATA_SCHEMA}))
    async def update_chat_completion(completion_id: str, request: Request) -> Response:
        body = parse_json_object(await read_body(request))
        if "metadata" not in body:
            raise InvalidRequestError("Missing required parameter: 'metadata'.", param="metadata", code="missing_required_parameter")
        return JSONBytes(await impl.store.update_metadata(completion_id, validate_metadata(body["metadata"])))

    @routes.delete("/chat/completions/{completion_id}", summary="Delete a stored chat completion")
    async def delete_chat_completion(completion_id: str) -> Response:
        await impl.store.delete(completion_id)  # a 404 for an id the caller may not delete
        return JSONBytes({"id": completion_id, "object": "chat.completion.deleted", "deleted": True})

    @routes.get("/chat/completions/{completion_id}/messages", summary="List the input messages of a stored chat completion")
    async def list_chat_completion_messages(
        completion_id: str, after: str | None = None, limit: int = 20, order: str = "asc"
    ) -> Response:
        messages = _store_messages(completion_id, await impl.store.messages(completion_id))
        return JSONBytes(_page_in_memory(messages, after, validate_limit(limit, CHAT_LIST_MAX), validate_order(order)))


def _metadata_filter(request: Request) -> dict[str, str]:
    # The SDK sends `metadata={"k": "v"}` as the query parameter `metadata[k]=v`.
    return {key[9:-1]: value for key, value in request.query_params.items() if key.startswith("metadata[") and key.endswith("]")}


def _store_messages(completion_id: str, messages: list[Any]) -> list[dict[str, Any]]:
    shaped = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):  # stored before messages were checked: shown as the text it was
            message = {"role": "user", "content": message if isinstance(message, str) else json.dumps(message)}
        content = message.get("content")
        parts = content if isinstance(content, list) else None
        text = content if isinstance(content, str) else None
        if parts is not None:
            text = "".join(part.get("text", "") for part in parts if isinstance(part, dict) and part.get("type") == "text") or None
        shaped.append({**message, "id": f"{completion_id}-{index}", "content": text, "content_parts": parts})
    return shaped


def _page_in_memory(items: list[dict[str, Any]], after: str | None, limit: int, order: str) -> dict[str, Any]:
    ordered = items if order == "asc" else items[::-1]
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise InvalidRequestError(f"Invalid 'after': no message with id '{after}'.", param="after", code="invalid_value")
        ordered = ordered[ids.index(after) + 1:]
    return cursor_page(ordered[:limit], len(ordered) > limit)
