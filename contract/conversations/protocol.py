"""What a conversations provider implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["ConversationsProvider"]


@runtime_checkable
class ConversationsProvider(Protocol):
    """Conversations and items in the OpenAI shapes. Item lists are cursor pages
    (`first_id`, `last_id`, `has_more`); a page's items may be dicts or, as a store read them,
    `contract.items.ItemText` (sent on without being parsed). Unknown ids raise NotFoundError."""

    async def create_conversation(self, items: Any, metadata: Any) -> dict[str, Any]: ...

    async def get_conversation(self, conversation_id: str) -> dict[str, Any]: ...

    async def update_conversation(self, conversation_id: str, metadata: Any) -> dict[str, Any]: ...

    async def delete_conversation(self, conversation_id: str) -> dict[str, Any]: ...

    async def add_items(self, conversation_id: str, items: Any) -> dict[str, Any]: ...

    async def list_items(self, conversation_id: str, after: str | None, limit: int, order: str) -> dict[str, Any]: ...

    async def get_item(self, conversation_id: str, item_id: str) -> dict[str, Any]: ...

    async def delete_item(self, conversation_id: str, item_id: str) -> dict[str, Any]: ...

    async def conversation_items(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every item, oldest first (a response's context). The caller does not change the
        list or its items, so a provider may hand out a cached list."""
        ...

    async def append_items(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
        """Append a response's input and output atomically and contiguously, with no size limit."""
        ...
