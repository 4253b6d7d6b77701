"""The contract of the containers API (`/v1/containers`, OpenAI's shapes), and what the
code_interpreter tool asks of it.

A container is `{id: "cntr_...", object: "container", name, created_at, status, last_active_at,
expires_after: {anchor: "last_active_at", minutes}, memory_limit, network_policy}`; `status` is `running` until it
has been idle for `expires_after.minutes` (20 by default), then `expired`: its sandbox is destroyed,
its record kept (a run in it raises `ContainerExpiredError`); deleting it removes both. Its files
are `{id: "cfile_...", object: "container.file", container_id, path: "/mnt/data/...", bytes,
created_at, source: "user" | "assistant"}`: uploaded or copied from the files API (`user`), or
written by code (`assistant`, registered after the cell that wrote them).

`network_policy` is `{type: "disabled"}` (no network, the default) or `{type: "allowlist",
allowed_domains}`: the hosts its code may reach through the sandboxes backend's proxy, each one
that the backend's operator allows (`allowed_hosts`), or a 400 naming `network_policy.allowed_domains`.

Containers and their files belong to the principal that created them (contract.caller): another
principal's id is unknown (404), as with every object of the stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contract.errors import NotFoundError
from contract.sandboxes.network import HostRule
from contract.sandboxes.protocol import CellOutput

__all__ = ["CodeRun", "ContainerExpiredError", "ContainerFileContent", "ContainersProvider", "NewContainer"]


class ContainerExpiredError(NotFoundError):
    """The container expired (idle too long): its sandbox and files are gone."""


@dataclass(frozen=True)
class NewContainer:
    """A create request, checked (routes and the code_interpreter tool build it)."""

    name: str
    file_ids: Sequence[str] = ()
    expires_after_minutes: int | None = None
    """None: the provider's default (20)."""
    memory_limit: str | None = None
    """One of contract.sandboxes.protocol.MEMORY_TIERS; None: the provider's default ("1g")."""
    allowed_domains: tuple[str, ...] | None = None
    """`network_policy: {"type": "allowlist", "allowed_domains"}` as given; None: `disabled` (no network)."""


@dataclass(frozen=True)
class CodeRun:
    """A cell run in a container, and the files it wrote."""

    output: CellOutput
    files: list[dict[str, Any]] = field(default_factory=list)
    """Container files (the API's shape) created or changed under /mnt/data by the cell."""


@dataclass(frozen=True)
class ContainerFileContent:
    chunks: AsyncIterator[bytes]
    size: int
    filename: str


@runtime_checkable
class ContainersProvider(Protocol):
    """Containers and their files. Unknown ids (and another principal's) raise NotFoundError."""

    @property
    def max_file_bytes(self) -> int:
        """The largest file put into a container (the request size limit of its upload route)."""

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        """The hosts a container's `network_policy` may allow (its sandboxes backend's); empty: none."""

    async def create_container(self, request: NewContainer) -> dict[str, Any]:
        """Copies each of `file_ids` (files API ids, the caller's) into /mnt/data under its filename;
        an unknown one is a 404 naming it, and nothing is created. `allowed_domains` outside
        `allowed_hosts` are a 400 naming `network_policy.allowed_domains`."""

    async def list_containers(self, after: str | None, limit: int, order: str, name: str | None) -> tuple[list[dict[str, Any]], bool]: ...

    async def get_container(self, container_id: str) -> dict[str, Any]: ...

    async def delete_container(self, container_id: str) -> dict[str, Any]: ...

    async def create_file(self, container_id: str, *, data: bytes | None = None, filename: str | None = None,
                          file_id: str | None = None) -> dict[str, Any]:
        """A file from uploaded bytes (`data`, `filename`) or copied from the files API (`file_id`)."""

    async def list_files(self, container_id: str, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]: ...

    async def get_file(self, container_id: str, file_id: str) -> dict[str, Any]: ...

    async def file_content(self, container_id: str, file_id: str) -> ContainerFileContent: ...

    async def delete_file(self, container_id: str, file_id: str) -> dict[str, Any]: ...

    async def run_code(self, container_id: str, code: str) -> CodeRun:
        """Run a cell in the container (its last activity now); ContainerExpiredError if it expired."""
