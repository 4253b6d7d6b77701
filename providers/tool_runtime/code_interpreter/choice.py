"""Which container a request's tool runs in (code_interpreter's `container`, the hosted shell's
`environment`): the one it names, or for `auto` the one the chain or conversation used last, or a
new one. A container gone meanwhile (expired, deleted) is replaced by a new one, and a note for the
model says that what earlier calls left there is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.containers.checks import check_network_policy
from contract.containers.protocol import CodeRun, ContainersProvider, NewContainer
from contract.errors import NotFoundError

__all__ = ["GONE", "ContainerChoice", "Wanted", "wanted"]

GONE = ("The container used before expired (it was idle too long), so this code ran in a new one: names defined and files "
        "written by earlier code are gone; the files given with the tool were copied again.")
# (No ids in what the model reads: the same turn reads the same, and replays from recordings.)


def wanted(setting: Any) -> Wanted:
    """A tool's setting read: a container id (code_interpreter's string, the shell's `container_reference`), or what a new
    one gets (`auto`, `container_auto`: checked already)."""
    if isinstance(setting, str):
        return Wanted() if setting == "auto" else Wanted(container_id=setting)
    if setting.get("type") == "container_reference":
        return Wanted(container_id=str(setting["container_id"]))
    return Wanted(file_ids=tuple(setting.get("file_ids") or ()), memory_limit=setting.get("memory_limit"),
                  allowed_domains=check_network_policy(setting.get("network_policy"), "network_policy"))


@dataclass(frozen=True)
class Wanted:
    """A tool's container setting, read: a container id, or `auto` with what a new one gets."""

    container_id: str | None = None
    file_ids: Sequence[str] = ()
    memory_limit: str | None = None
    allowed_domains: tuple[str, ...] | None = None
    """A new one's network (`network_policy`'s allowlist); None: none."""


@dataclass
class ContainerChoice:
    """One request's choice per tool (by index): the first call of a tool chooses, the calls after
    it (of the same turn too, which run at once) use that choice."""

    containers: ContainersProvider
    name: str
    """What a new container is named."""
    earlier: list[str]
    """Containers the chain's earlier calls ran in, oldest first."""
    _chosen: dict[int, str] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def container(self, index: int, wanted: Wanted, notes: list[str], gone: str | None = None) -> str:
        """The container of tool `index`; with `gone`, the one to use instead of that container."""
        async with self._lock:
            if gone is not None and self._chosen.get(index) == gone:
                del self._chosen[index]
            chosen = self._chosen.get(index)
            if chosen is None:
                chosen = self._chosen[index] = await self._choose(wanted, notes, gone)
            return chosen

    async def run(self, index: int, wanted: Wanted, container_id: str, code: str, notes: list[str]) -> tuple[str, CodeRun | None]:
        """Run `code` in `container_id`, tool `index`'s choice; if that is gone by then (expired, deleted), once
        more in a new one. The container it ran in (or was last tried in), and the run: None when none was left."""
        for attempt in range(2):
            try:
                return container_id, await self.containers.run_code(container_id, code)
            except NotFoundError:
                if attempt:
                    break
                container_id = await self.container(index, wanted, notes, gone=container_id)
        return container_id, None

    def chosen(self, index: int) -> str | None:
        """The container tool `index`'s calls run in now, once chosen."""
        return self._chosen.get(index)

    async def _choose(self, wanted: Wanted, notes: list[str], gone: str | None) -> str:
        target = gone or wanted.container_id or (self.earlier[-1] if self.earlier else None)
        if target is not None and gone is None and await self._running(target):
            return target
        created = await self.containers.create_container(NewContainer(
            name=self.name, file_ids=list(wanted.file_ids), memory_limit=wanted.memory_limit, allowed_domains=wanted.allowed_domains))
        if target is not None:
            notes.append(GONE)
        return str(created["id"])

    async def _running(self, container_id: str) -> bool:
        try:
            return (await self.containers.get_container(container_id)).get("status") != "expired"
        except NotFoundError:
            return False

