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
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from runtime.apis.items import ItemText
from runtime.auth import principal_id
from runtime.errors import NotFoundError
from runtime.storage import SMALL_WRITE_ROWS, Database, InsertRows, Prepared, caller_may, for_caller, insert_into, json_type

__all__ = ["ConversationStore"]

_metadata = sa.MetaData()
conversations = sa.Table(
    "conversations",
    _metadata,
    sa.Column("id", sa.String(96), primary_key=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("metadata", json_type(), nullable=True),
    sa.Column("next_seq", sa.BigInteger, nullable=False, default=0),
    # Who made it (runtime.auth): with auth on, only they reach it and its items. Null when auth was off.
    sa.Column("principal", sa.String(160), nullable=True, index=True),
)
conversation_items = sa.Table(
    "conversation_items",
    _metadata,
    sa.Column("conversation_id", sa.String(96), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("item_id", sa.String(128), nullable=False),
    sa.Column("item", json_type(), nullable=False),
    sa.Index("ix_conversation_items_item", "conversation_id", "item_id"),
)


# The statements of the hot paths, built once so SQLAlchemy does not walk them per call to find
# their cached compiled form (see providers/responses/store.py).
_GET = sa.select(conversations).where(conversations.c.id == sa.bindparam("cid"))
_VERSION = sa.select(conversations.c.next_seq).where(conversations.c.id == sa.bindparam("cid"))
_OWNED = conversations.c.principal == sa.bindparam("caller")  # not "principal": a column's own name is reserved in an UPDATE
_GET_OWNED = _GET.where(_OWNED)
_VERSION_OWNED = _VERSION.where(_OWNED)
_BURN_ONE = conversations.update().where(conversations.c.id == sa.bindparam("cid")).values(next_seq=conversations.c.next_seq + 1)


def _reserve(*owner: sa.ColumnElement[bool]) -> sa.Update:
    """The reservation of a block of `:count` numbers in conversation `:cid` (whose owner meets
    `owner`): it returns the new `next_seq` (the block's end) and the conversation's id."""
    return (conversations.update().where(conversations.c.id == sa.bindparam("cid"), *owner)
            .values(next_seq=conversations.c.next_seq + sa.bindparam("count", type_=sa.BigInteger))
            .returning(conversations.c.next_seq, conversations.c.id))


_RESERVE, _RESERVE_OWNED = Prepared(_reserve()), Prepared(_reserve(_OWNED))


def _reserve_and_insert(*owner: sa.ColumnElement[bool]) -> sa.Insert:
    """PostgreSQL: the reservation of a block and the insert of the block, as one statement. The
    items come as one JSON array (`:items`), numbered from the block's start in their order; it
    returns the seq of each item inserted, none if the conversation is not there (or not one the
    caller may update)."""
    reserved = _reserve(*owner).cte("reserved")
    elements = (sa.func.jsonb_array_elements(sa.bindparam("items", type_=json_type()))
                .table_valued("value", with_ordinality="ord").render_derived())
    block = sa.select(
        reserved.c.id,
        reserved.c.next_seq - sa.bindparam("count", type_=sa.BigInteger) + elements.c.ord - 1,
        elements.c.value.op("->>")("id"),
        elements.c.value,
    ).select_from(reserved).join(elements, sa.true())
    columns = ["conversation_id", "seq", "item_id", "item"]
    return conversation_items.insert().from_select(columns, block).add_cte(reserved).returning(conversation_items.c.seq)


_APPEND_ANY, _APPEND_OWNED = Prepared(_reserve_and_insert()), Prepared(_reserve_and_insert(_OWNED))
_ALL_ITEMS = (
    sa.select(conversation_items.c.item)
    .where(conversation_items.c.conversation_id == sa.bindparam("cid"))
    .order_by(conversation_items.c.seq)
)
_SEQ_OF = sa.select(conversation_items.c.seq).where(
    conversation_items.c.conversation_id == sa.bindparam("cid"), conversation_items.c.item_id == sa.bindparam("item_id"))
# A page's items as their stored JSON text (ItemText): sent on as they are, never parsed here.
_ITEM_TEXT = (conversation_items.c.item_id, sa.cast(conversation_items.c.item, sa.Text).label("text"))
_PAGE = {
    "asc": Prepared(sa.select(*_ITEM_TEXT)
                    .where(conversation_items.c.conversation_id == sa.bindparam("cid"), conversation_items.c.seq > sa.bindparam("anchor"))
                    .order_by(conversation_items.c.seq.asc()).limit(sa.bindparam("rows"))),
    "desc": Prepared(sa.select(*_ITEM_TEXT)
                     .where(conversation_items.c.conversation_id == sa.bindparam("cid"), conversation_items.c.seq < sa.bindparam("anchor"))
                     .order_by(conversation_items.c.seq.desc()).limit(sa.bindparam("rows"))),
}
# The page's reads, as Prepared statements (SQLAlchemy's work per row returned cost as much as the
# rest of a page's read).
_PAGE_VERSION, _PAGE_VERSION_OWNED, _PAGE_SEQ_OF = Prepared(_VERSION), Prepared(_VERSION_OWNED), Prepared(_SEQ_OF)
_BEFORE_ALL, _AFTER_ALL = -1, 2**62


def _scoped(plain: Any, owned: Any, params: dict[str, Any], action: str = "read",
            among: Callable[[sa.ColumnElement[bool]], Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The statement and parameters for the caller to `action` a conversation (runtime.storage.for_caller)."""
    return for_caller(plain, owned, conversations.c.principal, params, action, among=among)


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
        await self.db.create_tables(_metadata)

    async def create(self, conversation_id: str, metadata: dict[str, str] | None, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        created_at = int(time.time())
        row = {"id": conversation_id, "created_at": created_at, "metadata": metadata or {}, "next_seq": len(items),
               "principal": principal_id()}
        item_rows = _rows(conversation_id, 0, items)
        # One statement on PostgreSQL; on SQLite, grouped with other inserts queued with it.
        await self.db.write(InsertRows((conversations, [row]), (conversation_items, item_rows)), small=len(items) <= SMALL_WRITE_ROWS)
        return _public({"id": conversation_id, "created_at": created_at, "metadata": metadata or {}})

    async def get(self, conversation_id: str) -> dict[str, Any]:
        row = await self.db.fetch_one(*_scoped(_GET, _GET_OWNED, {"cid": conversation_id}))
        if row is None:
            raise _not_found(conversation_id)
        return _public(dict(row))

    async def update(self, conversation_id: str, metadata: dict[str, str] | None) -> dict[str, Any]:
        update = conversations.update().where(conversations.c.id == conversation_id, caller_may("update", conversations.c.principal))
        changed = await self.db.execute(update.values(metadata=metadata or {}))
        if not changed:
            raise _not_found(conversation_id)
        return await self.get(conversation_id)

    async def delete(self, conversation_id: str) -> None:
        delete = conversations.delete().where(conversations.c.id == conversation_id, caller_may("delete", conversations.c.principal))

        def work(connection: sa.Connection) -> bool:
            if not connection.execute(delete).rowcount:
                return False
            connection.execute(conversation_items.delete().where(conversation_items.c.conversation_id == conversation_id))
            return True

        self._forget(conversation_id)
        if not await self.db.write(work):
            raise _not_found(conversation_id)

    async def append(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
        """Add `items` at the end, contiguous and in order, however many there are."""
        if not items:
            if await self.db.fetch_one(*_scoped(_VERSION, _VERSION_OWNED, {"cid": conversation_id}, "update")) is None:
                raise _not_found(conversation_id)
            return
        block = {"cid": conversation_id, "count": len(items)}
        if self.db.dialect == "postgresql":
            both, params = _scoped(_APPEND_ANY, _APPEND_OWNED, block, "update", among=_reserve_and_insert)

            def in_one(connection: sa.Connection) -> int | None:
                seqs = both.run(connection, {**params, "items": list(items)}).rows
                return max(seq for seq, in seqs) + 1 if seqs else None

            end = await self.db.write(in_one, one_statement=True)
        else:
            reserve, params = _scoped(_RESERVE, _RESERVE_OWNED, block, "update")

            def work(connection: sa.Connection) -> int | None:
                end = reserve.run(connection, params).scalar()
                if end is None:
                    return None
                insert_into(conversation_items).run(connection, _rows(conversation_id, int(end) - len(items), items))
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
        version_of = _scoped(_VERSION, _VERSION_OWNED, {"cid": conversation_id}, action)  # another owner's reads as absent

        def work(connection: sa.Connection) -> tuple[int, list[dict[str, Any]] | None] | None:
            # The version first: items read after it are at least as new, so a list is never
            # cached under a version newer than itself.
            version = connection.execute(*version_of).scalar()
            if version is None:
                return None
            if version == known:
                return version, None
            return version, [row.item for row in connection.execute(_ALL_ITEMS, {"cid": conversation_id})]

        found: tuple[int, list[dict[str, Any]] | None] | None
        if cached is None or self.db.dialect != "sqlite":
            found = await self.db.read_with(work)  # on PostgreSQL one round trip, whichever way it goes
        else:
            # Whether the cached list is still the conversation's is one indexed row: read on the
            # event loop, where a reading thread's hop there and back costs more than the read.
            version = await self.db.read_with(lambda connection: connection.execute(*version_of).scalar(), small=True)
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

        version, params = _scoped(_PAGE_VERSION, _PAGE_VERSION_OWNED, {"cid": conversation_id})

        def work(connection: sa.Connection) -> list[ItemText] | str:
            if not version.run(connection, params).rows:
                return "conversation"
            anchor = _BEFORE_ALL if order == "asc" else _AFTER_ALL
            if after is not None:
                seq = _PAGE_SEQ_OF.run(connection, {"cid": conversation_id, "item_id": after}).scalar()
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
        row = await self.db.fetch_one(sa.select(conversation_items.c.item).where(
            conversation_items.c.conversation_id == conversation_id, conversation_items.c.item_id == item_id))
        if row is None:
            raise _item_not_found(conversation_id, item_id, param="item_id")
        return dict(row["item"])

    async def delete_item(self, conversation_id: str, item_id: str) -> None:
        await self.get_item(conversation_id, item_id)
        if await self.db.fetch_one(*_scoped(_VERSION, _VERSION_OWNED, {"cid": conversation_id}, "update")) is None:
            raise _not_found(conversation_id)
        delete = conversation_items.delete().where(
            conversation_items.c.conversation_id == conversation_id, conversation_items.c.item_id == item_id)

        def work(connection: sa.Connection) -> None:
            if connection.execute(delete).rowcount:
                connection.execute(_BURN_ONE, {"cid": conversation_id})  # a new version

        self._forget(conversation_id)
        await self.db.write(work)


def _item_not_found(conversation_id: str, item_id: str, *, param: str) -> NotFoundError:
    return NotFoundError(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", param=param, code="item_not_found")


def _rows(conversation_id: str, first_seq: int, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"conversation_id": conversation_id, "seq": first_seq + offset, "item_id": item["id"], "item": item}
            for offset, item in enumerate(items)]


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "object": "conversation", "created_at": row["created_at"], "metadata": row["metadata"] or {}}
