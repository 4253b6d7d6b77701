"""Conversations and their items, ordered by a per-conversation sequence.

Appending reserves a block of sequence numbers with one atomic increment of the conversation's
`next_seq` (which also locks the row on PostgreSQL until commit), then inserts the block, all in
one transaction: two writers never interleave within each other's block, and the order never
depends on timestamps. On PostgreSQL both are one statement (the increment in a data-modifying
WITH), run in autocommit: one round trip, where a transaction of two statements takes four.
Listing walks the (conversation_id, seq) primary key, so a page costs the same at any
conversation size.

`next_seq` is also the conversation's version: every change to its items moves it (deleting an
item burns a number). A response's context, the whole item list, is kept in memory by conversation
and reused while the version read with it is unchanged: one row read instead of every item, in
this process or after another one wrote (it then reads the list again).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from contract.items import ItemText
from contract.caller import principal_id
from contract.errors import NotFoundError
from runtime.storage import (
    BIGINT, JSON, SMALL_WRITE_ROWS, Column, Database, Index, InsertRows, Scoped, Sql, String, insert_rows, loads, table,
)

__all__ = ["ConversationStore"]

conversations = table(
    "conversations",
    Column("id", String(96), primary_key=True),
    Column("created_at", BIGINT, nullable=False),
    Column("metadata", JSON),
    Column("next_seq", BIGINT, nullable=False, default=0),
    # Who made it (runtime.security.auth): with auth on, only they reach it and its items. Null when auth was off.
    Column("principal", String(160), index=True),
)
conversation_items = table(
    "conversation_items",
    Column("conversation_id", String(96), primary_key=True),
    Column("seq", BIGINT, primary_key=True),
    Column("item_id", String(128), nullable=False),
    Column("item", JSON, nullable=False),
    Index("ix_conversation_items_item", ("conversation_id", "item_id")),
)


# A conversation the caller may read (or update, delete): its owner is the caller's, or one the
# access policy grants (runtime.storage.Scoped).
_GET = Scoped("SELECT id, created_at, CAST(metadata AS TEXT) FROM conversations WHERE id = :cid{owner}", "principal")
_VERSION = Scoped("SELECT next_seq FROM conversations WHERE id = :cid{owner}", "principal")
_UPDATE = Scoped("UPDATE conversations SET metadata = :metadata WHERE id = :cid{owner}", "principal", json=["metadata"])
_DELETE = Scoped("DELETE FROM conversations WHERE id = :cid{owner}", "principal")
_DELETE_ITEMS = Sql("DELETE FROM conversation_items WHERE conversation_id = :cid")
_BURN_ONE = Sql("UPDATE conversations SET next_seq = next_seq + 1 WHERE id = :cid")
# The reservation of a block of `:count` numbers: it returns the new `next_seq` (the block's end).
_RESERVE = Scoped("UPDATE conversations SET next_seq = next_seq + :count WHERE id = :cid{owner} RETURNING next_seq", "principal")
# PostgreSQL: the reservation and the insert of the block as one statement. The items come as one
# JSON array (`:items`), numbered from the block's start in their order; it returns the seq of each
# item inserted, none if the conversation is not there (or not one the caller may update).
_RESERVE_AND_INSERT = Scoped(
    "WITH reserved AS (UPDATE conversations SET next_seq = next_seq + :count WHERE id = :cid{owner} RETURNING next_seq, id) "
    "INSERT INTO conversation_items (conversation_id, seq, item_id, item) "
    "SELECT reserved.id, reserved.next_seq - :count + elements.ord - 1, elements.value ->> 'id', elements.value "
    "FROM reserved JOIN jsonb_array_elements(:items::jsonb) WITH ORDINALITY AS elements(value, ord) ON true "
    "RETURNING conversation_items.seq",
    "principal", json=["items"])
_ALL_ITEMS = Sql("SELECT CAST(item AS TEXT) FROM conversation_items WHERE conversation_id = :cid ORDER BY seq")
_SEQ_OF = Sql("SELECT seq FROM conversation_items WHERE conversation_id = :cid AND item_id = :item_id")
_ITEM = Sql("SELECT CAST(item AS TEXT) FROM conversation_items WHERE conversation_id = :cid AND item_id = :item_id")
_DELETE_ITEM = Sql("DELETE FROM conversation_items WHERE conversation_id = :cid AND item_id = :item_id")
# A page's items as their stored JSON text (ItemText): sent on as they are, never parsed here.
_PAGE = {
    "asc": Sql("SELECT item_id, CAST(item AS TEXT) FROM conversation_items WHERE conversation_id = :cid AND seq > :anchor "
               "ORDER BY seq ASC LIMIT :rows"),
    "desc": Sql("SELECT item_id, CAST(item AS TEXT) FROM conversation_items WHERE conversation_id = :cid AND seq < :anchor "
                "ORDER BY seq DESC LIMIT :rows"),
}
_BEFORE_ALL, _AFTER_ALL = -1, 2**62


def _not_found(conversation_id: str) -> NotFoundError:
    return NotFoundError(f"Conversation with id '{conversation_id}' not found.", param="conversation_id", code="conversation_not_found")


CACHED_ITEMS = 100_000  # items kept in memory across all cached conversations


class ConversationStore:
    def __init__(self, db: Database, cached_items: int = CACHED_ITEMS) -> None:
        self.db = db
        self._contexts: OrderedDict[str, tuple[int, list[dict[str, Any]]]] = OrderedDict()
        self._cached = 0
        self._cache_limit = cached_items

    async def create_tables(self) -> None:
        await self.db.create_tables([conversations, conversation_items])

    async def create(self, conversation_id: str, metadata: dict[str, str] | None, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        created_at = int(time.time())
        row = {"id": conversation_id, "created_at": created_at, "metadata": metadata or {}, "next_seq": len(items),
               "principal": principal_id()}
        item_rows = _rows(conversation_id, 0, items)
        # One statement on PostgreSQL; on SQLite, grouped with other inserts queued with it.
        await self.db.write(InsertRows((conversations, [row]), (conversation_items, item_rows)), small=len(items) <= SMALL_WRITE_ROWS)
        return _public({"id": conversation_id, "created_at": created_at, "metadata": metadata or {}})

    async def get(self, conversation_id: str) -> dict[str, Any]:
        row = await self.db.read_one(*_GET.for_caller({"cid": conversation_id}))
        if row is None:
            raise _not_found(conversation_id)
        conversation_id, created_at, metadata = row
        return _public({"id": conversation_id, "created_at": created_at, "metadata": loads(metadata)})

    async def update(self, conversation_id: str, metadata: dict[str, str] | None) -> dict[str, Any]:
        changed = await self.db.write_one(*_UPDATE.for_caller({"cid": conversation_id, "metadata": metadata or {}}, "update"))
        if not changed:
            raise _not_found(conversation_id)
        return await self.get(conversation_id)

    async def delete(self, conversation_id: str) -> None:
        delete, params = _DELETE.for_caller({"cid": conversation_id}, "delete")

        def work(connection: Any) -> bool:
            if not delete.run(connection, params).rowcount:
                return False
            _DELETE_ITEMS.run(connection, {"cid": conversation_id})
            return True

        self._forget(conversation_id)
        if not await self.db.write(work):
            raise _not_found(conversation_id)

    async def append(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
        """Add `items` at the end, contiguous and in order, however many there are."""
        if not items:
            if await self.db.read_one(*_VERSION.for_caller({"cid": conversation_id}, "update")) is None:
                raise _not_found(conversation_id)
            return
        block = {"cid": conversation_id, "count": len(items)}
        if self.db.dialect == "postgresql":
            both, params = _RESERVE_AND_INSERT.for_caller(block, "update")

            def in_one(connection: Any) -> int | None:
                seqs = both.run(connection, {**params, "items": list(items)}).rows
                return max(seq for seq, in seqs) + 1 if seqs else None

            end = await self.db.write(in_one, one_statement=True)
        else:
            reserve, params = _RESERVE.for_caller(block, "update")

            def work(connection: Any) -> int | None:
                end = reserve.run(connection, params).scalar()
                if end is None:
                    return None
                insert_rows(connection, conversation_items, _rows(conversation_id, int(end) - len(items), items))
                return int(end)

            end = await self.db.write(work, small=len(items) <= SMALL_WRITE_ROWS)
        if end is None:
            self._forget(conversation_id)
            raise _not_found(conversation_id)
        cached = self._contexts.get(conversation_id)
        if cached is not None and cached[0] == end - len(items):
            # Nothing else changed the conversation between the cached list and this block.
            self._keep(conversation_id, end, [*cached[1], *items])
        else:
            self._forget(conversation_id)

    async def items(self, conversation_id: str, action: str = "read") -> list[dict[str, Any]]:
        """Every item, oldest first: the context of a response in this conversation. The list
        may be the cached one: the caller must not change it."""
        cached = self._contexts.get(conversation_id)
        known = cached[0] if cached is not None else None
        version_of, params = _VERSION.for_caller({"cid": conversation_id}, action)  # another owner's reads as absent

        def work(connection: Any) -> tuple[int, list[dict[str, Any]] | None] | None:
            # The version first: items read after it are at least as new, so a list is never
            # cached under a version newer than itself.
            version = version_of.run(connection, params).scalar()
            if version is None:
                return None
            if version == known:
                return version, None
            return version, [loads(text) for text, in _ALL_ITEMS.run(connection, {"cid": conversation_id}).rows]

        found: tuple[int, list[dict[str, Any]] | None] | None
        if cached is None or self.db.dialect != "sqlite":
            found = await self.db.read_with(work)  # on PostgreSQL one round trip, whichever way it goes
        else:
            # Whether the cached list is still the conversation's is one indexed row: read on the
            # event loop, where a reading thread's hop there and back costs more than the read.
            version = await self.db.read_with(lambda connection: version_of.run(connection, params).scalar(), small=True)
            if version is None:
                found = None
            elif version == known:
                found = version, None
            else:
                found = await self.db.read_with(work)
        if found is None:
            self._forget(conversation_id)
            raise _not_found(conversation_id)
        version, items = found
        if items is None:
            assert cached is not None
            # The list read before is that version's, whatever became of its cache entry meanwhile.
            if self._contexts.get(conversation_id) is cached:
                self._contexts.move_to_end(conversation_id)
            return cached[1]
        self._keep(conversation_id, version, items)
        return items

    def _keep(self, conversation_id: str, version: int, items: list[dict[str, Any]]) -> None:
        self._forget(conversation_id)
        if len(items) > self._cache_limit:
            return
        self._contexts[conversation_id] = (version, items)
        self._cached += len(items)
        while self._cached > self._cache_limit:
            _, (_, evicted) = self._contexts.popitem(last=False)
            self._cached -= len(evicted)

    def _forget(self, conversation_id: str) -> None:
        dropped = self._contexts.pop(conversation_id, None)
        if dropped is not None:
            self._cached -= len(dropped[1])

    async def page(self, conversation_id: str, *, after: str | None, limit: int, order: str) -> tuple[list[ItemText], bool]:
        """One page of items as their stored text, read in one go (one connection, one thread hop on SQLite)."""

        version, params = _VERSION.for_caller({"cid": conversation_id})

        def work(connection: Any) -> list[ItemText] | str:
            if not version.run(connection, params).rows:
                return "conversation"
            anchor = _BEFORE_ALL if order == "asc" else _AFTER_ALL
            if after is not None:
                seq = _SEQ_OF.run(connection, {"cid": conversation_id, "item_id": after}).scalar()
                if seq is None:
                    return "after"
                anchor = int(seq)
            rows = _PAGE[order].run(connection, {"cid": conversation_id, "anchor": anchor, "rows": limit + 1}).rows
            return [ItemText(item_id, text) for item_id, text in rows]

        found = await self.db.read_with(work, small=True)  # a page: at most 101 rows, by the primary key
        if found == "conversation":
            raise _not_found(conversation_id)
        if isinstance(found, str):
            raise _item_not_found(conversation_id, str(after), param="after")
        return found[:limit], len(found) > limit

    async def get_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        await self.get(conversation_id)
        row = await self.db.read_one(_ITEM, {"cid": conversation_id, "item_id": item_id})
        if row is None:
            raise _item_not_found(conversation_id, item_id, param="item_id")
        return dict(loads(row[0]))

    async def delete_item(self, conversation_id: str, item_id: str) -> None:
        await self.get_item(conversation_id, item_id)
        if await self.db.read_one(*_VERSION.for_caller({"cid": conversation_id}, "update")) is None:
            raise _not_found(conversation_id)

        def work(connection: Any) -> None:
            if _DELETE_ITEM.run(connection, {"cid": conversation_id, "item_id": item_id}).rowcount:
                _BURN_ONE.run(connection, {"cid": conversation_id})  # a new version

        self._forget(conversation_id)
        await self.db.write(work)


def _item_not_found(conversation_id: str, item_id: str, *, param: str) -> NotFoundError:
    return NotFoundError(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", param=param, code="item_not_found")


def _rows(conversation_id: str, first_seq: int, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"conversation_id": conversation_id, "seq": first_seq + offset, "item_id": item["id"], "item": item}
            for offset, item in enumerate(items)]


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "object": "conversation", "created_at": row["created_at"], "metadata": row["metadata"] or {}}
