"""The contract of the sandboxes API: where code_interpreter's code runs.

A sandbox backend (`bubblewrap`, `docker`, `kubernetes`, a third party's own) is a provider of
this API, published by an entry point in the group `stack.providers.sandboxes`. The containers
API (`/v1/containers`) keeps the records, owners and expiry of containers; each container is one
sandbox of the configured backend, named by the container's id:

- a place for files, `/mnt/data` inside, that outlives the kernel (`create` makes it, `destroy`
  removes it with everything in it);
- a persistent Python kernel, started by the first `run` in a process that has none for the
  sandbox (after a restart, or `stop` for idleness), so that names one cell defines are there
  for the next. `CellOutput.fresh_kernel` says when a cell ran in a new kernel.

Isolation is the backend's whole job: code in a sandbox must not reach the host's files, the
server's process, the network (but the hosts its operator allows, below), or another sandbox; limits on
memory, CPU time, processes and file size hold. A backend that cannot verify its isolation on the
host at start refuses to start (its factory raises, naming what is missing and the alternatives).

Network: a backend whose operator allows hosts reports them (`allowed_hosts`, rules of
`contract.sandboxes.network`); a sandbox created with `allowed_domains` (each covered by those
rules) may reach those hosts, and only them, on the operator's ports, through the backend's proxy
(HTTP CONNECT and plain HTTP, the code's HTTP_PROXY and HTTPS_PROXY), which resolves each name
itself and refuses private, loopback, link-local and reserved addresses. Without `allowed_domains`
a sandbox has no network at all. A backend that cannot do this reports no hosts, and refuses
`allowed_domains` with `InvalidRequestError`.

Paths given to the file methods are relative to `/mnt/data` ("plot.png", "out/table.csv"); a
path that leaves it (`..`, absolute) raises `InvalidRequestError`, one that names no file
`NotFoundError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from contract.sandboxes.network import HostRule

__all__ = ["DATA_DIR", "MEMORY_TIERS", "CellOutput", "HeldSandbox", "SandboxBackend", "SandboxFile"]

DATA_DIR = "/mnt/data"
"""Where a sandbox's files are, as the code inside sees them."""

MEMORY_TIERS: dict[str, int] = {"1g": 1 << 30, "4g": 4 << 30, "16g": 16 << 30, "64g": 64 << 30}
"""OpenAI's container memory limits (`memory_limit`), in bytes."""


@dataclass(frozen=True)
class CellOutput:
    """What one cell of code did."""

    logs: str
    """What it printed (stdout and stderr, in order), then the value of its last expression if it
    ends with one (as a notebook shows it), then the traceback if it raised; cut at the backend's
    output limit (`truncated`)."""
    images: tuple[bytes, ...] = ()
    """PNG images it displayed: each matplotlib figure open at its end (closed once shown)."""
    status: Literal["completed", "failed", "timeout"] = "completed"
    """`failed`: it raised (the traceback is in `logs`); `timeout`: it ran past the time limit and was
    interrupted (or its kernel killed, if the interrupt did not take: the next cell gets a new one)."""
    truncated: bool = False
    fresh_kernel: bool = False
    """The cell ran in a kernel started for it: names defined by earlier cells are gone."""


@dataclass(frozen=True)
class SandboxFile:
    path: str
    """Relative to /mnt/data, `/`-separated."""
    bytes: int
    modified_ns: int


@dataclass(frozen=True)
class HeldSandbox:
    """A sandbox a backend holds: made by `create`, not destroyed yet."""

    sandbox_id: str
    created_at: float
    """When it was made, in seconds since the epoch."""


@runtime_checkable
class SandboxBackend(Protocol):
    """Sandboxes, each named by the id of the container it serves."""

    @property
    def max_memory_bytes(self) -> int:
        """The largest memory limit a sandbox may have here (what the host has, capped by config)."""

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        """The hosts a sandbox may be allowed to reach (the operator's list); empty: no network for any."""

    async def create(self, sandbox_id: str, memory_bytes: int, allowed_domains: Sequence[str] = ()) -> None:
        """Make the sandbox's place for files (the kernel starts with the first `run`). `allowed_domains`
        (host names, `*.` patterns, each covered by `allowed_hosts`: else `InvalidRequestError`) are the
        hosts its code may reach, kept with it for every kernel it starts; none: no network."""

    async def run(self, sandbox_id: str, code: str) -> CellOutput:
        """Run one cell in the sandbox's kernel, starting one if it has none in this process.
        Cells of one sandbox run one at a time (a second waits for the first)."""

    async def stop(self, sandbox_id: str) -> None:
        """Stop its kernel, if one runs here; its files stay."""

    async def destroy(self, sandbox_id: str) -> None:
        """Stop its kernel and remove its files; nothing of it is left. No error if it is gone."""

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> SandboxFile:
        """Write (or overwrite) a file under /mnt/data, making its directories."""

    def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """A file's bytes, in chunks."""

    async def list_files(self, sandbox_id: str) -> list[SandboxFile]:
        """Every regular file under /mnt/data, by path."""

    async def delete_file(self, sandbox_id: str, path: str) -> None: ...

    async def held(self) -> list[HeldSandbox]:
        """Every sandbox this backend holds, whoever made it: the containers provider destroys the
        ones no running container names (a crash between making a sandbox and recording its
        container, or between expiring a container and destroying its sandbox, leaves one)."""
