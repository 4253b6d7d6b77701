"""The built-in prompts provider: prompts and their versions in the configured database
(`prompts` store)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from contract.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from contract.caller import principal_id
from contract.errors import InvalidRequestError, NotFoundError
from contract.ids import random_hex
from runtime.storage import BIGINT, INTEGER, JSON, TEXT, Column, Database, Index, Scoped, Sql, String, Unique, insert_rows, loads, table

__all__ = ["BUILTIN", "BuiltinPrompts"]

prompts = table(
    "prompts",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("prompt_id", String(64), nullable=False, unique=True),
    Column("created_at", BIGINT, nullable=False),
    Column("latest_version", INTEGER, nullable=False),
    Column("default_version", INTEGER, nullable=False),
    # Who made it (runtime.security.auth): with auth on, only they reach it and its versions. Null when auth was off.
    Column("principal", String(160)),
    Index("ix_prompts_principal", ("principal", "seq")),
)


versions = table(
    "prompt_versions",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("prompt_id", String(64), nullable=False),
    Column("version", INTEGER, nullable=False),
    Column("template", TEXT, nullable=False),
    Column("variables", JSON, nullable=False),
    Column("created_at", BIGINT, nullable=False),
    Unique("uq_prompt_versions_prompt_version", ("prompt_id", "version")),
)

_VERSION = "prompt_versions.prompt_id, template, version, CAST(variables AS TEXT), prompt_versions.created_at"  # what `_public` reads
_HEAD = Scoped("SELECT default_version FROM prompts WHERE prompt_id = :pid{owner}", "principal")
_LISTED = Scoped(f"SELECT {_VERSION}, default_version FROM prompts JOIN prompt_versions ON prompt_versions.prompt_id = prompts.prompt_id "
                 "AND prompt_versions.version = prompts.default_version WHERE true{owner} ORDER BY prompts.seq DESC", "principal")
_ONE = Sql(f"SELECT {_VERSION} FROM prompt_versions WHERE prompt_id = :pid AND version = :version")
_EVERY = Sql(f"SELECT {_VERSION} FROM prompt_versions WHERE prompt_id = :pid ORDER BY version")
_LATEST = Sql("SELECT latest_version FROM prompts WHERE prompt_id = :pid")
# Only on top of the latest version: two clients saving from the same version cannot both win.
_ON_TOP = Sql("UPDATE prompts SET latest_version = :new WHERE prompt_id = :pid AND latest_version = :version")
_ON_TOP_AS_DEFAULT = Sql("UPDATE prompts SET latest_version = :new, default_version = :new WHERE prompt_id = :pid AND latest_version = :version")
_SET_DEFAULT = Sql("UPDATE prompts SET default_version = :version WHERE prompt_id = :pid")
_DELETE = [Sql("DELETE FROM prompt_versions WHERE prompt_id = :pid"), Sql("DELETE FROM prompts WHERE prompt_id = :pid")]


class BuiltinPrompts:
    """Implements contract.prompts.protocol.PromptsProvider."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_prompt(self, template: str, variables: Sequence[str]) -> dict[str, Any]:
        prompt_id = f"pmpt_{random_hex(24)}"  # 48 hex digits, as OGX makes them
        now = int(time.time())
        principal = principal_id()  # here: the write runs on the database's thread, outside the request's context

        def write(conn: Any) -> None:
            insert_rows(conn, prompts, [{"prompt_id": prompt_id, "created_at": now, "latest_version": 1, "default_version": 1,
                                         "principal": principal}])
            insert_rows(conn, versions, [{"prompt_id": prompt_id, "version": 1, "template": template, "variables": list(variables),
                                          "created_at": now}])

        await self.db.write(write)
        return await self.get_prompt(prompt_id, 1)

    async def list_prompts(self) -> list[dict[str, Any]]:
        rows = await self.db.read_all(*_LISTED.for_caller({}))
        return [_public(row, row[-1]) for row in rows]

    async def get_prompt(self, prompt_id: str, version: int | None = None) -> dict[str, Any]:
        head = await self._head(prompt_id)
        wanted = head if version is None else version
        row = await self.db.read_one(_ONE, {"pid": prompt_id, "version": wanted})
        if row is None:
            raise NotFoundError(f"Prompt '{prompt_id}' has no version {wanted}.", param="version", code="not_found")
        return _public(row, head)

    async def list_versions(self, prompt_id: str) -> list[dict[str, Any]]:
        head = await self._head(prompt_id)
        rows = await self.db.read_all(_EVERY, {"pid": prompt_id})
        return [_public(row, head) for row in rows]

    async def update_prompt(self, prompt_id: str, template: str, variables: Sequence[str], version: int,
                            set_as_default: bool) -> dict[str, Any]:
        await self._head(prompt_id, "update")
        now = int(time.time())

        def write(conn: Any) -> int:
            new = version + 1
            on_top = _ON_TOP_AS_DEFAULT if set_as_default else _ON_TOP
            if not on_top.run(conn, {"pid": prompt_id, "version": version, "new": new}).rowcount:
                latest = _LATEST.run(conn, {"pid": prompt_id}).scalar()
                raise InvalidRequestError(f"Invalid 'version': {version} is not the latest version of '{prompt_id}' ({latest}); "
                                          "get the latest and save on top of it.", param="version", code="invalid_value")
            insert_rows(conn, versions, [{"prompt_id": prompt_id, "version": new, "template": template, "variables": list(variables),
                                          "created_at": now}])
            return new

        return await self.get_prompt(prompt_id, await self.db.write(write))

    async def set_default_version(self, prompt_id: str, version: int) -> dict[str, Any]:
        await self._head(prompt_id, "update")
        await self.get_prompt(prompt_id, version)
        await self.db.write_one(_SET_DEFAULT, {"pid": prompt_id, "version": version})
        return await self.get_prompt(prompt_id, version)

    async def delete_prompt(self, prompt_id: str) -> None:
        await self._head(prompt_id, "delete")

        def write(conn: Any) -> None:
            for delete in _DELETE:
                delete.run(conn, {"pid": prompt_id})

        await self.db.write(write)

    async def _head(self, prompt_id: str, action: str = "read") -> int:
        """The prompt's default version, if the caller may `action` it."""
        row = await self.db.read_one(*_HEAD.for_caller({"pid": prompt_id}, action))
        if row is None:
            raise NotFoundError(f"No prompt found with id '{prompt_id[:64]}'.", param="prompt_id", code="not_found")
        return int(row[0])


def _public(row: tuple[Any, ...], default_version: int) -> dict[str, Any]:
    prompt_id, template, version, variables, created_at = row[:5]
    return {"object": "prompt", "prompt_id": prompt_id, "prompt": template, "version": version,
            "variables": list(loads(variables) or []), "is_default": version == default_version, "created_at": created_at}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[EmptyConfig]) -> AsyncIterator[BuiltinPrompts]:
    db = context.databases("prompts")
    await db.create_tables([prompts, versions])
    yield BuiltinPrompts(db)


BUILTIN = ProviderSpec(
    api=Api.prompts,
    name="builtin",
    config_model=EmptyConfig,
    factory=create,
    description="Versioned prompt templates in the configured database (`prompts` store), for the `prompt` parameter of Responses",
)
