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

import sqlalchemy as sa

from runtime.auth import CachedAnswers, Principal, key_hash
from runtime.ids import random_hex
from runtime.storage import Database, json_type

__all__ = ["DatabaseKeys", "new_key"]

_metadata = sa.MetaData()
api_keys = sa.Table(
    "api_keys",
    _metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("key_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("principal", sa.String(160), nullable=False),
    sa.Column("attributes", json_type(), nullable=False),
    sa.Column("name", sa.String(256), nullable=True),
    sa.Column("created_at", sa.Integer, nullable=False),
    sa.Column("expires_at", sa.Integer, nullable=True),
    sa.Column("revoked_at", sa.Integer, nullable=True),
)

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
            await self.db.create_tables(_metadata)
            self._ready = True

    async def principal(self, token: str) -> Principal | None:
        return await self._answers.principal(token, self._find)

    async def _find(self, _token: str, digest: str) -> Principal | None:
        await self.create_tables()
        row = await self.db.fetch_one(sa.select(api_keys).where(api_keys.c.key_sha256 == digest))
        if row is None or row["revoked_at"] is not None or (row["expires_at"] is not None and row["expires_at"] <= time.time()):
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
        await self.db.execute(api_keys.insert().values(row))
        return key, _public(row)

    async def list(self) -> list[dict[str, Any]]:
        await self.create_tables()
        return [_public(dict(row)) for row in await self.db.fetch_all(sa.select(api_keys).order_by(api_keys.c.created_at))]

    async def revoke(self, key_id: str) -> bool:
        await self.create_tables()
        changed = await self.db.execute(api_keys.update().where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                                        .values(revoked_at=int(time.time())))
        return changed > 0


def _public(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in ("id", "principal", "attributes", "name", "created_at", "expires_at", "revoked_at")}
