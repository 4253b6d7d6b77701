"""Stored chat completions (`store: true`), listed in the order they were stored.

A stored completion is known by an id of ours (`new_completion_id`), never by the upstream's:
upstreams reuse ids (Ollama draws them from 999 values, some servers always answer the same
one), and a store keyed by them overwrote one completion with another. The upstream's id is
kept beside ours."""

from __future__ import annotations

from typing import Any

from contract.caller import principal_id
from contract.errors import NotFoundError
from contract.ids import random_hex
from runtime.storage import (
    BIGINT, INTEGER, JSON, TEXT, Column, Database, Index, InsertRows, Scoped, Sql, String, loads, owner_condition, table,
)

__all__ = ["ChatCompletionStore", "new_completion_id"]

completions = table(
    "chat_completions",
    # A sequence, not `created`, orders the list: many completions share a second.
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(128), nullable=False, unique=True),
    Column("created", BIGINT, nullable=False),
    Column("model", String(256), nullable=False, index=True),
    Column("metadata", JSON),
    Column("completion", JSON, nullable=False),
    Column("input_messages", JSON, nullable=False),
    Column("upstream_id", TEXT),
    # Who made it (runtime.security.auth): with auth on, only they reach it. Null when auth was off.
    Column("principal", String(160)),
    Index("ix_chat_completions_principal", ("principal", "seq")),
)

_PUBLIC = "CAST(completion AS TEXT), CAST(metadata AS TEXT)"  # what `_public` is made of
_GET = Scoped(f"SELECT {_PUBLIC} FROM chat_completions WHERE id = :cid{{owner}}", "principal")
_MESSAGES = Scoped("SELECT CAST(input_messages AS TEXT) FROM chat_completions WHERE id = :cid{owner}", "principal")
_UPDATE = Scoped("UPDATE chat_completions SET metadata = :metadata WHERE id = :cid{owner}", "principal", json=["metadata"])
_DELETE = Scoped("DELETE FROM chat_completions WHERE id = :cid{owner}", "principal")


def _not_found(completion_id: str) -> NotFoundError:
    return NotFoundError(f"No chat completion found with id '{completion_id}'.", param="completion_id", code="not_found")


def new_completion_id() -> str:
    """An id of ours for a stored completion, in OpenAI's form (`chatcmpl-...`)."""
    return f"chatcmpl-{random_hex(16)}"


class ChatCompletionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.create_tables([completions])

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
        row = await self.db.read_one(*_GET.for_caller({"cid": completion_id}))
        if row is None:
            raise _not_found(completion_id)
        return _public(row)

    async def messages(self, completion_id: str) -> list[Any]:
        row = await self.db.read_one(*_MESSAGES.for_caller({"cid": completion_id}))
        if row is None:
            raise _not_found(completion_id)
        return list(loads(row[0]))

    async def page(
        self, *, after: str | None, limit: int, order: str, model: str | None, metadata: dict[str, str]
    ) -> tuple[list[dict[str, Any]], bool]:
        owner, params = owner_condition("principal")
        where = f"true{owner}"
        if after is not None:
            where += f" AND seq {'>' if order == 'asc' else '<'} (SELECT seq FROM chat_completions WHERE id = :after)"
            params["after"] = after
        if model is not None:
            where += " AND model = :model"
            params["model"] = model
        sqlite_where = postgres_where = where
        for index, (key, value) in enumerate(metadata.items()):
            # The value at `key` as text (JSON null, or no such key: no match).
            sqlite_where += f" AND json_extract(metadata, :path_{index}) = :value_{index}"
            postgres_where += f" AND metadata ->> :key_{index} = :value_{index}"
            params.update({f"path_{index}": f'$."{key}"', f"key_{index}": key, f"value_{index}": value})
        tail = f" ORDER BY seq {'ASC' if order == 'asc' else 'DESC'} LIMIT :rows"
        query = Sql(f"SELECT {_PUBLIC} FROM chat_completions WHERE {sqlite_where}{tail}",
                    postgresql=f"SELECT {_PUBLIC} FROM chat_completions WHERE {postgres_where}{tail}")
        params["rows"] = limit + 1
        rows = await self.db.read_all(query, params)  # (each database's text takes the parameters it names)
        return [_public(row) for row in rows[:limit]], len(rows) > limit

    async def update_metadata(self, completion_id: str, metadata: dict[str, str] | None) -> dict[str, Any]:
        if not await self.db.write_one(*_UPDATE.for_caller({"cid": completion_id, "metadata": metadata}, "update")):
            raise _not_found(completion_id)
        return await self.get(completion_id)

    async def delete(self, completion_id: str) -> None:
        if not await self.db.write_one(*_DELETE.for_caller({"cid": completion_id}, "delete")):
            raise _not_found(completion_id)


def _public(row: tuple[Any, ...]) -> dict[str, Any]:
    completion, metadata = row
    return {**loads(completion), "metadata": loads(metadata) or {}}
