"""Routes of the Conversations API (/v1/conversations...). Each is one call into the provider."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from runtime.apis.common import METADATA_SCHEMA, JSONBytes, json_body, include_query
from runtime.apis.item_schema import item_schema
from contract.checks import parse_json_object, validate_id, validate_limit, validate_order
from contract.conversations.protocol import ConversationsProvider
from contract.items import shown_item, shown_items
from runtime.http.direct_routes import read_body
from contract.errors import InvalidRequestError
from runtime.http.routing import Routes

__all__ = ["router"]

_ITEM = item_schema(response=False)
"""An item a conversation stores (contract.items.normalize_item; a reference to a stored item it takes none of)."""


def router(impl: ConversationsProvider) -> Routes:
    routes = Routes()

    @routes.post("/conversations", summary="Create a conversation, with up to 20 initial items", openapi_extra=json_body([], {
        "items": {"type": ["array", "null"], "maxItems": 20, "items": _ITEM}, "metadata": METADATA_SCHEMA}, more=False, optional=True))
    async def create_conversation(request: Request) -> Response:
        body = await _body(request, ("items", "metadata"), allow_empty=True)
        return JSONBytes(await impl.create_conversation(body.get("items"), body.get("metadata")))

    @routes.get("/conversations/{conversation_id}", summary="Get a conversation")
    async def get_conversation(conversation_id: str) -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        return JSONBytes(await impl.get_conversation(conversation_id))

    @routes.post("/conversations/{conversation_id}", summary="Update a conversation's metadata",
                 openapi_extra=json_body(["metadata"], {"metadata": METADATA_SCHEMA}, more=False))
    async def update_conversation(conversation_id: str, request: Request) -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        body = await _body(request, ("metadata",))
        if "metadata" not in body:
            raise InvalidRequestError("Missing required parameter: 'metadata'.", param="metadata", code="missing_required_parameter")
        return JSONBytes(await impl.update_conversation(conversation_id, body["metadata"]))

    @routes.delete("/conversations/{conversation_id}", summary="Delete a conversation and its items")
    async def delete_conversation(conversation_id: str) -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        return JSONBytes(await impl.delete_conversation(conversation_id))

    @routes.post("/conversations/{conversation_id}/items", summary="Add up to 20 items to a conversation", openapi_extra=json_body(
        ["items"], {"items": {"type": "array", "minItems": 1, "maxItems": 20, "items": _ITEM}}, more=False))
    async def add_items(conversation_id: str, request: Request) -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        body = await _body(request, ("items",))
        if "items" not in body:
            raise InvalidRequestError("Missing required parameter: 'items'.", param="items", code="missing_required_parameter")
        if body["items"] == []:
            raise InvalidRequestError("Invalid 'items': empty array. Expected an array with minimum length 1, but got an empty array "
                                      "instead.", param="items", code="empty_array")
        return JSONBytes(await impl.add_items(conversation_id, body["items"]))

    @routes.get("/conversations/{conversation_id}/items", summary="List a conversation's items")
    async def list_items(conversation_id: str, http: Request, after: str | None = None, limit: int = 20, order: str = "desc") -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        include = include_query(http)
        page = await impl.list_items(conversation_id, after, validate_limit(limit), validate_order(order))
        return JSONBytes({**page, "data": shown_items(page["data"], include)})

    @routes.get("/conversations/{conversation_id}/items/{item_id}", summary="Get an item of a conversation")
    async def get_item(conversation_id: str, item_id: str, http: Request) -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        return JSONBytes(shown_item(await impl.get_item(conversation_id, item_id), include_query(http)))

    @routes.delete("/conversations/{conversation_id}/items/{item_id}", summary="Delete an item; returns the conversation")
    async def delete_item(conversation_id: str, item_id: str) -> Response:
        validate_id(conversation_id, "conversation_id", "conv")
        return JSONBytes(await impl.delete_item(conversation_id, item_id))

    return routes


async def _body(request: Request, known: tuple[str, ...], allow_empty: bool = False) -> dict[str, Any]:
    raw = await read_body(request)
    if allow_empty and not raw.strip():
        return {}
    body = parse_json_object(raw)
    for key in body:
        if key not in known:  # as OpenAI: a misspelt field is refused, not silently dropped
            raise InvalidRequestError(f"Unknown parameter: '{key[:64]}'.", param=key[:64], code="unknown_parameter")
    return body
