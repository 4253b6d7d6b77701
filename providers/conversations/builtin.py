"""The built-in conversations provider: durable, ordered item lists that responses share."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from providers.conversations.store import ConversationStore
from contract.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from contract.checks import cursor_page, validate_metadata
from contract.items import new_id, normalize_item
from contract.errors import InvalidRequestError

__all__ = ["BUILTIN", "BuiltinConversations"]

MAX_ITEMS_PER_CALL = 20


class BuiltinConversations:
    """Implements contract.conversations.protocol.ConversationsProvider."""

    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    async def create_conversation(self, items: Any, metadata: Any) -> dict[str, Any]:
        checked = _checked_items(items if items is not None else [], "items")
        return await self.store.create(new_id("conv"), validate_metadata(metadata), checked)

    async def get_conversation(self, conversation_id: str) -> dict[str, Any]:
        return await self.store.get(conversation_id)

    async def update_conversation(self, conversation_id: str, metadata: Any) -> dict[str, Any]:
        return await self.store.update(conversation_id, validate_metadata(metadata))

    async def delete_conversation(self, conversation_id: str) -> dict[str, Any]:
        await self.store.delete(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    async def add_items(self, conversation_id: str, items: Any) -> dict[str, Any]:
        checked = _checked_items(items, "items")
        await self.store.append(conversation_id, checked)
        return cursor_page(checked, has_more=False)

    async def list_items(self, conversation_id: str, after: str | None, limit: int, order: str) -> dict[str, Any]:
        data, has_more = await self.store.page(conversation_id, after=after, limit=limit, order=order)
        return cursor_page(data, has_more)

    async def get_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        return await self.store.get_item(conversation_id, item_id)

    async def delete_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        await self.store.delete_item(conversation_id, item_id)
        return await self.store.get(conversation_id)

    # The responses API's side: the whole context, and appends of any size.

    async def conversation_items(self, conversation_id: str) -> list[dict[str, Any]]:
        # For a response to continue the conversation: it will append, so it needs the right to.
        return await self.store.items(conversation_id, "update")

    async def append_items(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
        await self.store.append(conversation_id, [_with_id(dict(item)) for item in items])


def _checked_items(items: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise InvalidRequestError(f"Invalid type for '{param}': expected an array of items.", param=param, code="invalid_type")
    if len(items) > MAX_ITEMS_PER_CALL:
        raise InvalidRequestError(
            f"Invalid '{param}': at most {MAX_ITEMS_PER_CALL} items can be added at once, got {len(items)}.", param=param, code="invalid_value"
        )
    checked = [_with_id(normalize_item(item, f"{param}[{index}]")) for index, item in enumerate(items)]
    for index, item in enumerate(checked):
        if item["type"] == "item_reference":
            raise InvalidRequestError(f"Invalid value for '{param}[{index}].type': item references cannot be stored in a conversation.",
                                      param=f"{param}[{index}].type", code="invalid_value")
    return checked


def _with_id(item: dict[str, Any]) -> dict[str, Any]:
    if not item.get("id"):
        item["id"] = new_id("item")
    return item


@contextlib.asynccontextmanager
async def create(context: ProviderContext[EmptyConfig]) -> AsyncIterator[BuiltinConversations]:
    store = ConversationStore(context.databases("conversations"))
    await store.create_tables()
    yield BuiltinConversations(store)


BUILTIN = ProviderSpec(
    api=Api.conversations,
    name="builtin",
    config_model=EmptyConfig,
    factory=create,
    description="Conversations kept in the stack's storage, shared by responses",
)
