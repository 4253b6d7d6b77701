"""Containers over a sandbox backend: what each call does to the records and to the sandbox.

The order of every change is the one a crash cannot turn into a lie: a file's bytes are written
into the sandbox before its record is made (a crash in between leaves bytes with no record, which
`reconcile` records at the next start), a container's sandbox is made before its record, and a
deleted container's records go before its sandbox. A container idle past its expiry is expired
by the sweep, or by the first request that finds it so, whichever comes first.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from contract.caller import principal_id
from contract.containers.protocol import CodeRun, ContainerExpiredError, ContainerFileContent, NewContainer
from contract.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from contract.files.protocol import FilesProvider
from contract.ids import random_hex
from contract.sandboxes.network import HostRule, check_allowed_domains
from contract.sandboxes.protocol import DATA_DIR, SandboxBackend, SandboxFile
from providers.containers.config import BuiltinContainersConfig
from providers.containers.copying import file_name, from_files_api, memory_bytes
from providers.containers.store import ContainerStore

__all__ = ["BuiltinContainers"]

log = logging.getLogger("stack")

ORPHAN_AGE_S = 3600.0


class BuiltinContainers:
    """Implements contract.containers.protocol.ContainersProvider."""

    def __init__(self, store: ContainerStore, sandboxes: SandboxBackend, files: FilesProvider | None,
                 config: BuiltinContainersConfig, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.sandboxes = sandboxes
        self.files = files
        self.config = config
        self.clock = clock
        self.busy: Counter[str] = Counter()
        """Containers with a cell running in this process: the sweep leaves them be."""

    @property
    def max_file_bytes(self) -> int:
        return self.config.max_file_bytes

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        return self.sandboxes.allowed_hosts

    def _now(self) -> int:
        return int(self.clock())

    async def create_container(self, request: NewContainer) -> dict[str, Any]:
        minutes = self._minutes(request.expires_after_minutes)
        tier = request.memory_limit or self.config.default_memory_limit
        memory = memory_bytes(tier, self.sandboxes.max_memory_bytes)
        domains = () if request.allowed_domains is None else \
            check_allowed_domains(list(request.allowed_domains), self.allowed_hosts, "network_policy.allowed_domains")
        sources = [await from_files_api(self.files, file_id, self.config.max_file_bytes, "file_ids") for file_id in request.file_ids]
        container_id = f"cntr_{random_hex(16)}"
        now = self._now()
        await self.sandboxes.create(container_id, memory, domains)
        try:
            written = [await self.sandboxes.write_file(container_id, name, await source()) for name, source in sources]
            record = {"id": container_id, "name": request.name, "created_at": now, "last_active_at": now, "expires_minutes": minutes,
                      "memory_limit": tier, "status": "running", "principal": principal_id(),
                      "allowed_domains": "\n".join(domains) if domains else None}
            rows = {file.path: self._file_row(container_id, file, "user", now) for file in written}  # a name twice: the last copy
            await self.store.add(record, list(rows.values()))
        except BaseException:
            await self.sandboxes.destroy(container_id)
            raise
        return self._public(record)

    def _minutes(self, minutes: int | None) -> int:
        if minutes is None:
            return self.config.default_expiry_minutes
        if not 1 <= minutes <= self.config.max_expiry_minutes:
            raise InvalidRequestError(f"Invalid 'expires_after.minutes': expected 1 to {self.config.max_expiry_minutes} on this server, "
                                      f"got {minutes}.", param="expires_after.minutes", code="invalid_value")
        return minutes

    async def list_containers(self, after: str | None, limit: int, order: str, name: str | None) -> tuple[list[dict[str, Any]], bool]:
        rows, has_more = await self.store.page(after, limit, order, name)
        return [self._public(row) for row in rows], has_more

    async def get_container(self, container_id: str) -> dict[str, Any]:
        return self._public(await self._container(container_id))

    async def delete_container(self, container_id: str) -> dict[str, Any]:
        await self._container(container_id, "delete")
        await self.store.delete(container_id)
        await self.sandboxes.destroy(container_id)
        return {"id": container_id, "object": "container.deleted", "deleted": True}

    async def create_file(self, container_id: str, *, data: bytes | None = None, filename: str | None = None,
                          file_id: str | None = None) -> dict[str, Any]:
        container = await self._running(container_id, "update")
        if file_id is not None:
            name, source = await from_files_api(self.files, file_id, self.config.max_file_bytes, "file_id")
            data = await source()
        elif data is not None:
            name = file_name(filename or "", "upload")
            if len(data) > self.config.max_file_bytes:
                raise PayloadTooLargeError(f"The file is larger than this server's limit of {self.config.max_file_bytes} bytes for a "
                                          "container file.", param="file", code="file_too_large")
        else:
            raise InvalidRequestError("Missing required parameter: 'file' (an upload) or 'file_id'.", param="file",
                                      code="missing_required_parameter")
        written = await self.sandboxes.write_file(container_id, name, data)
        now = self._now()
        stored = await self.store.put_file(self._file_row(container_id, written, "user", now, container["principal"]))
        await self.store.touch(container_id, now)
        return _public_file(stored)

    async def list_files(self, container_id: str, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        await self._running(container_id)
        rows, has_more = await self.store.list_files(container_id, after, limit, order)
        return [_public_file(row) for row in rows], has_more

    async def get_file(self, container_id: str, file_id: str) -> dict[str, Any]:
        await self._running(container_id)
        return _public_file(await self._file(container_id, file_id))

    async def file_content(self, container_id: str, file_id: str) -> ContainerFileContent:
        await self._running(container_id)
        row = await self._file(container_id, file_id)
        await self.store.touch(container_id, self._now())
        path = str(row["path"])
        return ContainerFileContent(self.sandboxes.read_file(container_id, path), int(row["bytes"]), path.rpartition("/")[2])

    async def delete_file(self, container_id: str, file_id: str) -> dict[str, Any]:
        await self._running(container_id, "update")
        row = await self._file(container_id, file_id)
        await self.store.delete_file(container_id, file_id)
        try:
            await self.sandboxes.delete_file(container_id, str(row["path"]))
        except NotFoundError:
            pass  # code in the container removed it already
        await self.store.touch(container_id, self._now())
        return {"id": file_id, "object": "container.file.deleted", "deleted": True}

    async def run_code(self, container_id: str, code: str) -> CodeRun:
        container = await self._running(container_id, "update")
        self.busy[container_id] += 1
        try:
            await self.store.touch(container_id, self._now())
            before = await self.sandboxes.list_files(container_id)
            output = await self.sandboxes.run(container_id, code)
            after = await self.sandboxes.list_files(container_id)
            files = await self._register(container_id, container["principal"], before, after)
            await self.store.touch(container_id, self._now())
        finally:
            self.busy[container_id] -= 1
            if not self.busy[container_id]:
                del self.busy[container_id]
        return CodeRun(output, files)

    async def _register(self, container_id: str, principal: str | None, before: list[SandboxFile],
                        after: list[SandboxFile]) -> list[dict[str, Any]]:
        """Record the files a cell created or changed (by path, size and time of change); forget those it removed."""
        seen = {file.path: (file.bytes, file.modified_ns) for file in before}
        now = self._now()
        registered = [_public_file(await self.store.put_file(self._file_row(container_id, file, "assistant", now, principal)))
                      for file in after if seen.get(file.path) != (file.bytes, file.modified_ns)]
        await self.store.forget_paths(container_id, seen.keys() - {file.path for file in after})
        return registered

    async def sweep(self) -> None:
        """Expire the containers idle past their expiry (but those running a cell here), then reclaim orphans."""
        for container_id in await self.store.overdue(self._now()):
            if container_id not in self.busy:
                await self._expire(container_id)
        await self.reclaim()

    async def reclaim(self) -> None:
        """Destroy the sandboxes no running container names, once ORPHAN_AGE_S old: what a crash between making a
        sandbox and recording its container (or expiring a container and destroying its sandbox) left. The age
        leaves alone a container being made, whose sandbox comes before its record, here or in another process."""
        running = {container_id for container_id, _ in await self.store.running()}
        for held in await self.sandboxes.held():
            if held.sandbox_id not in running and self.clock() - held.created_at > ORPHAN_AGE_S:
                log.warning("sandbox %s belongs to no running container (a crash left it): destroyed", held.sandbox_id)
                await self.sandboxes.destroy(held.sandbox_id)

    async def reconcile(self) -> None:
        """At start, what a crash left: records of files no longer in their sandbox go, and files
        a sandbox holds with no record (written, then the crash) are recorded."""
        for container_id, principal in await self.store.running():
            try:
                present = await self.sandboxes.list_files(container_id)
            except NotFoundError:
                log.warning("container %s has no sandbox any more: it is expired", container_id)
                await self._expire(container_id)
                continue
            recorded = await self.store.files(container_id)
            await self._register(container_id, principal, [SandboxFile(row["path"], row["bytes"], row["modified_ns"]) for row in recorded],
                                 present)

    async def _expire(self, container_id: str) -> None:
        if await self.store.expire(container_id):
            await self.sandboxes.destroy(container_id)

    async def _container(self, container_id: str, action: str = "read") -> dict[str, Any]:
        row = await self.store.container(container_id, action)
        if row is None:
            raise NotFoundError(f"No container found with id '{container_id[:80]}'.", param="container_id", code="not_found")
        return row

    async def _running(self, container_id: str, action: str = "read") -> dict[str, Any]:
        """The container, if it has not expired (if it is past its expiry, it expires now)."""
        row = await self._container(container_id, action)
        if row["status"] == "running" and not self._overdue(row):
            return row
        if row["status"] == "running":
            await self._expire(container_id)
        raise ContainerExpiredError(f"Container {container_id} has expired (no activity for {row['expires_minutes']} minutes): its "
                                    "sandbox and files are gone. Create a new container.", param="container_id", code="container_expired")

    def _overdue(self, row: dict[str, Any]) -> bool:
        return int(row["last_active_at"]) + int(row["expires_minutes"]) * 60 <= self._now()

    async def _file(self, container_id: str, file_id: str) -> dict[str, Any]:
        row = await self.store.file(container_id, file_id)
        if row is None:
            raise NotFoundError(f"No file found with id '{file_id[:80]}' in container {container_id}.", param="file_id", code="not_found")
        return row

    def _file_row(self, container_id: str, file: SandboxFile, source: str, now: int, principal: str | None = None) -> dict[str, Any]:
        return {"id": f"cfile_{random_hex(16)}", "container_id": container_id, "path": file.path, "bytes": file.bytes,
                "modified_ns": file.modified_ns, "created_at": now, "source": source,
                "principal": principal if principal is not None else principal_id()}

    def _public(self, row: dict[str, Any]) -> dict[str, Any]:
        status = "expired" if row["status"] != "running" or self._overdue(row) else "running"
        return {"id": row["id"], "object": "container", "name": row["name"], "created_at": row["created_at"], "status": status,
                "last_active_at": row["last_active_at"], "expires_after": {"anchor": "last_active_at", "minutes": row["expires_minutes"]},
                "memory_limit": row["memory_limit"], "network_policy": _network_policy(row.get("allowed_domains"))}


def _network_policy(allowed_domains: str | None) -> dict[str, Any]:
    if not allowed_domains:
        return {"type": "disabled"}
    return {"type": "allowlist", "allowed_domains": allowed_domains.split("\n")}


def _public_file(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "object": "container.file", "container_id": row["container_id"], "path": f"{DATA_DIR}/{row['path']}",
            "bytes": row["bytes"], "created_at": row["created_at"], "source": row["source"]}

