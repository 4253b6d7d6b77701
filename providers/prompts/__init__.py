"""The built-in prompts provider: prompts and their versions in the configured database
(`prompts` store)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import sqlalchemy as sa

from providers.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from runtime.auth import principal_id
from runtime.errors import InvalidRequestError, NotFoundError
from runtime.ids import random_hex
from runtime.storage import Database, caller_may, json_type

__all__ = ["BUILTIN", "BuiltinPrompts"]

metadata = sa.MetaData()

prompts = sa.Table(
    "prompts",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("prompt_id", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("latest_version", sa.Integer, nullable=False),
    sa.Column("default_version", sa.Integer, nullable=False),
    # Who made it (runtime.auth): with auth on, only they reach it and its versions. Null when auth was off.
    sa.Column("principal", sa.String(160), nullable=True),
    sa.Index("ix_prompts_principal", "principal", "seq"),
)


versions = sa.Table(
    "prompt_versions",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("prompt_id", sa.String(64), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("template", sa.Text, nullable=False),
    sa.Column("variables", json_type(), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("prompt_id", "version", name="uq_prompt_versions_prompt_version"),
)


class BuiltinPrompts:
    """Implements runtime.apis.prompts.protocol.PromptsProvider."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_prompt(self, template: str, variables: Sequence[str]) -> dict[str, Any]:
        prompt_id = f"pmpt_{random_hex(24)}"  # 48 hex digits, as OGX makes them
        now = int(time.time())
        principal = principal_id()  # here: the write runs on the database's thread, outside the request's context

        def write(conn: sa.Connection) -> None:
            conn.execute(prompts.insert().values(prompt_id=prompt_id, created_at=now, latest_version=1, default_version=1,
                                                 principal=principal))
            conn.execute(versions.insert().values(prompt_id=prompt_id, version=1, template=template, variables=list(variables),
                                                  created_at=now))

        await self.db.write(write)
        return await self.get_prompt(prompt_id, 1)

    async def list_prompts(self) -> list[dict[str, Any]]:
        joined = prompts.join(versions, sa.and_(versions.c.prompt_id == prompts.c.prompt_id, versions.c.version == prompts.c.default_version))
        query = sa.select(versions, prompts.c.default_version).select_from(joined).where(caller_may("read", prompts.c.principal))
        rows = await self.db.fetch_all(query.order_by(prompts.c.seq.desc()))
        return [_public(row, row["default_version"]) for row in rows]

    async def get_prompt(self, prompt_id: str, version: int | None = None) -> dict[str, Any]:
        head = await self._head(prompt_id)
        wanted = head["default_version"] if version is None else version
        row = await self.db.fetch_one(sa.select(versions).where(versions.c.prompt_id == prompt_id, versions.c.version == wanted))
        if row is None:
            raise NotFoundError(f"Prompt '{prompt_id}' has no version {wanted}.", param="version", code="not_found")
        return _public(row, head["default_version"])

    async def list_versions(self, prompt_id: str) -> list[dict[str, Any]]:
        head = await self._head(prompt_id)
        rows = await self.db.fetch_all(sa.select(versions).where(versions.c.prompt_id == prompt_id).order_by(versions.c.version))
        return [_public(row, head["default_version"]) for row in rows]

    async def update_prompt(self, prompt_id: str, template: str, variables: Sequence[str], version: int,
                            set_as_default: bool) -> dict[str, Any]:
        await self._head(prompt_id, "update")
        now = int(time.time())

        def write(conn: sa.Connection) -> int:
            new = version + 1
            values: dict[str, Any] = {"latest_version": new, **({"default_version": new} if set_as_default else {})}
            # Only on top of the latest version: two clients saving from the same version cannot both win.
            if not conn.execute(prompts.update().where(prompts.c.prompt_id == prompt_id, prompts.c.latest_version == version)
                                .values(values)).rowcount:
                latest = conn.execute(sa.select(prompts.c.latest_version).where(prompts.c.prompt_id == prompt_id)).scalar()
                raise InvalidRequestError(f"Invalid 'version': {version} is not the latest version of '{prompt_id}' ({latest}); "
                                          "get the latest and save on top of it.", param="version", code="invalid_value")
            conn.execute(versions.insert().values(prompt_id=prompt_id, version=new, template=template, variables=list(variables),
                                                  created_at=now))
            return new

        return await self.get_prompt(prompt_id, await self.db.write(write))

    async def set_default_version(self, prompt_id: str, version: int) -> dict[str, Any]:
        await self._head(prompt_id, "update")
        await self.get_prompt(prompt_id, version)
        await self.db.execute(prompts.update().where(prompts.c.prompt_id == prompt_id).values(default_version=version))
        return await self.get_prompt(prompt_id, version)

    async def delete_prompt(self, prompt_id: str) -> None:
        await self._head(prompt_id, "delete")

        def write(conn: sa.Connection) -> None:
            conn.execute(versions.delete().where(versions.c.prompt_id == prompt_id))
            conn.execute(prompts.delete().where(prompts.c.prompt_id == prompt_id))

        await self.db.write(write)

    async def _head(self, prompt_id: str, action: str = "read") -> sa.RowMapping:
        row = await self.db.fetch_one(sa.select(prompts).where(prompts.c.prompt_id == prompt_id, caller_may(action, prompts.c.principal)))
        if row is None:
            raise NotFoundError(f"No prompt found with id '{prompt_id[:64]}'.", param="prompt_id", code="not_found")
        return row


def _public(row: Any, default_version: int) -> dict[str, Any]:
    return {"object": "prompt", "prompt_id": row["prompt_id"], "prompt": row["template"], "version": row["version"],
            "variables": list(row["variables"] or []), "is_default": row["version"] == default_version, "created_at": row["created_at"]}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[EmptyConfig]) -> AsyncIterator[BuiltinPrompts]:
    db = context.databases("prompts")
    await db.create_tables(metadata)
    yield BuiltinPrompts(db)


BUILTIN = ProviderSpec(
    api=Api.prompts,
    name="builtin",
    config_model=EmptyConfig,
    factory=create,
    description="Versioned prompt templates in the configured database (`prompts` store), for the `prompt` parameter of Responses",
)
