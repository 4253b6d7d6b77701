"""Stored chat completions (`store: true`), listed in the order they were stored.

A stored completion is known by an id of ours (`new_completion_id`), never by the upstream's:
upstreams reuse ids (Ollama draws them from 999 values, some servers always answer the same
one), and a store keyed by them overwrote one completion with another. The upstream's id is
kept beside ours."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from runtime.auth import principal_id
from runtime.errors import NotFoundError
from runtime.ids import random_hex
from runtime.storage import Database, InsertRows, caller_may, json_type

__all__ = ["ChatCompletionStore", "new_completion_id"]

_metadata = sa.MetaData()
completions = sa.Table(
    "chat_completions",
    _metadata,
    # A sequence, not `created`, orders the list: many completions share a second.
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(128), nullable=False, unique=True),
    sa.Column("created", sa.BigInteger, nullable=False),
    sa.Column("model", sa.String(256), nullable=False, index=True),
    sa.Column("metadata", json_type(), nullable=True),
    sa.Column("completion", json_type(), nullable=False),
    sa.Column("input_messages", json_type(), nullable=False),
    sa.Column("upstream_id", sa.Text, nullable=True),
    # Who made it (runtime.auth): with auth on, only they reach it. Null when auth was off.
    sa.Column("principal", sa.String(160), nullable=True),
    sa.Index("ix_chat_completions_principal", "principal", "seq"),
)


def new_completion_id() -> str:
    """An id of ours for a stored completion, in OpenAI's form (`chatcmpl-...`)."""
    return f"chatcmpl-{random_hex(16)}"


class ChatCompletionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.create_tables(_metadata)

    async def save(self, completion: dict[str, Any], input_messages: list[Any], metadata: dict[str, str] | None,
                   upstream_id: str | None = None) -> None:
        """Insert a completion whose `id` is ours (`new_completion_id`): an insert, never an
        overwrite, so a reused id is an error rather than a lost completion."""
        row = {"id": completion["id"], "created": int(completion.get("created") or 0), "model": completion.get("model") or "",
               "metadata": metadata, "completion": completion, "input_messages": input_messages, "upstream_id": upstream_id,
               "principal": principal_id()}
        # An InsertRows write: grouped with other writes on SQLite, one statement built once on PostgreSQL.
        await self.db.write(InsertRows((completions, [row])), small=True)

    async def get(self, completion_id: str) -> dict[str, Any]:
        row = await self.db.fetch_one(sa.select(completions).where(completions.c.id == completion_id, caller_may("read", completions.c.principal)))
        if row is None:
            raise NotFoundError(f"No chat completion found with id '{completion_id}'.", param="completion_id", code="not_found")
        return _public(row)

    async def messages(self, completion_id: str) -> list[Any]:
        row = await self.db.fetch_one(sa.select(completions.c.input_messages).where(completions.c.id == completion_id, caller_may("read", completions.c.principal)))
        if row is None:
            raise NotFoundError(f"No chat completion found with id '{completion_id}'.", param="completion_id", code="not_found")
        return list(row["input_messages"])

    async def page(
        self, *, after: str | None, limit: int, order: str, model: str | None, metadata: dict[str, str]
    ) -> tuple[list[dict[str, Any]], bool]:
        query = sa.select(completions).where(caller_may("read", completions.c.principal))
        if after is not None:
            anchor = sa.select(completions.c.seq).where(completions.c.id == after).scalar_subquery()
            query = query.where(completions.c.seq > anchor if order == "asc" else completions.c.seq < anchor)
        if model is not None:
            query = query.where(completions.c.model == model)
        for key, value in metadata.items():
            query = query.where(completions.c.metadata[key].as_string() == value)
        query = query.order_by(completions.c.seq.asc() if order == "asc" else completions.c.seq.desc()).limit(limit + 1)
        rows = await self.db.fetch_all(query)
        return [_public(row) for row in rows[:limit]], len(rows) > limit

    async def update_metadata(self, completion_id: str, metadata: dict[str, str] | None) -> dict[str, Any]:
        update = sa.update(completions).where(completions.c.id == completion_id, caller_may("update", completions.c.principal))
        changed = await self.db.execute(update.values(metadata=metadata))
        if not changed:
            raise NotFoundError(f"No chat completion found with id '{completion_id}'.", param="completion_id", code="not_found")
        return await self.get(completion_id)

    async def delete(self, completion_id: str) -> None:
        if not await self.db.execute(sa.delete(completions).where(completions.c.id == completion_id, caller_may("delete", completions.c.principal))):
            raise NotFoundError(f"No chat completion found with id '{completion_id}'.", param="completion_id", code="not_found")


def _public(row: sa.RowMapping) -> dict[str, Any]:
    return {**row["completion"], "metadata": row["metadata"] or {}}
