"""API keys kept in the database (run.yaml `server.auth.database_keys`), made, listed and revoked
with `stack keys`. Only a key's SHA-256 is stored: the key itself is shown once, when made.

A lookup is reused for `cache_s` (a few seconds), so a key costs a query only now and then, and
a revoked or expired key stops working on every replica within that time.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

from runtime.security.auth import CachedAnswers, key_hash
from contract.caller import Principal
from contract.ids import random_hex
from runtime.storage import INTEGER, JSON, Column, Database, InsertRows, Sql, String, loads, table

__all__ = ["DatabaseKeys", "new_key"]

api_keys = table(
    "api_keys",
    Column("id", String(64), primary_key=True),
    Column("key_sha256", String(64), nullable=False, unique=True),
    Column("principal", String(160), nullable=False),
    Column("attributes", JSON, nullable=False),
    Column("name", String(256)),
    Column("created_at", INTEGER, nullable=False),
    Column("expires_at", INTEGER),
    Column("revoked_at", INTEGER),
)

_COLUMNS = ("id", "principal", "attributes", "name", "created_at", "expires_at", "revoked_at")  # a key's public record
_SELECT = "SELECT id, principal, CAST(attributes AS TEXT), name, created_at, expires_at, revoked_at FROM api_keys"
_FIND = Sql(f"{_SELECT} WHERE key_sha256 = :digest")
_LIST = Sql(f"{_SELECT} ORDER BY created_at")
_REVOKE = Sql("UPDATE api_keys SET revoked_at = :now WHERE id = :kid AND revoked_at IS NULL")

KEY_PREFIX = "sk-stack-"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class DatabaseKeys:
    """The keys of the `metadata` store: the principal a bearer token stands for, if any."""

    def __init__(self, db: Database, cache_s: float = 5.0) -> None:
        self.db = db
        self._answers = CachedAnswers(cache_s)
        self._ready = False

    async def create_tables(self) -> None:
        if not self._ready:
            await self.db.create_tables([api_keys])
            self._ready = True

    async def principal(self, token: str) -> Principal | None:
        return await self._answers.principal(token, self._find)

    async def _find(self, _token: str, digest: str) -> Principal | None:
        await self.create_tables()
        found = await self.db.read_one(_FIND, {"digest": digest})
        if found is None:
            return None
        row = _record(found)
        if row["revoked_at"] is not None or (row["expires_at"] is not None and row["expires_at"] <= time.time()):
            return None
        return Principal(row["principal"], dict(row["attributes"] or {}), "api_key")

    # --- `stack keys` ------------------------------------------------------------------------------

    async def create(self, principal: str, attributes: Mapping[str, Any], name: str | None = None,
                     expires_in_s: int | None = None) -> tuple[str, dict[str, Any]]:
        """A new key for `principal`: the key (shown only now) and its public record."""
        await self.create_tables()
        key, now = new_key(), int(time.time())
        row = {"id": "key_" + random_hex(12), "key_sha256": key_hash(key), "principal": principal, "attributes": dict(attributes),
               "name": name, "created_at": now, "expires_at": now + expires_in_s if expires_in_s else None, "revoked_at": None}
        await self.db.write(InsertRows((api_keys, [row])))
        return key, _public(row)

    async def list(self) -> list[dict[str, Any]]:
        await self.create_tables()
        return [_record(row) for row in await self.db.read_all(_LIST)]

    async def revoke(self, key_id: str) -> bool:
        await self.create_tables()
        return await self.db.write_one(_REVOKE, {"kid": key_id, "now": int(time.time())}) > 0


def _public(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in _COLUMNS}


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    record = dict(zip(_COLUMNS, row))
    record["attributes"] = loads(record["attributes"])
    return record
