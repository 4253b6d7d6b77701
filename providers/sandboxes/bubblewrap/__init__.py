"""The default sandboxes backend: each sandbox a bubblewrap (`bwrap`) process on the server's host.

No daemon, no image: a sandbox starts in tens of milliseconds, with the runtime venv that
`stack sandbox setup` makes (numpy, pandas, matplotlib). What isolates it, and what holds each
limit, is said in `command.py` (namespaces, mounts), `cgroups.py` (processes) and the driver
(`providers/sandboxes/kernel.py`: RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE); `probe.py` proves it at
start, or the provider does not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from builder.sandbox_venv import DEFAULT_VENV
from contract.sandboxes.network import parse_host_rule
from contract.sandboxes.protocol import MEMORY_TIERS
from contract.spec import Api, ProviderContext, ProviderSpec
from providers.sandboxes.bubblewrap.backend import BubblewrapSandboxes, Settings
from providers.sandboxes.bubblewrap.cgroups import PidsCgroups
from providers.sandboxes.bubblewrap.command import inspect_runtime
from providers.sandboxes.bubblewrap.probe import ALTERNATIVES, IsolationError, find_bwrap, verify_isolation
from runtime.security.netguard import AddressPolicy

__all__ = ["BUBBLEWRAP", "BubblewrapConfig", "BubblewrapSandboxes", "host_memory_bytes", "open_backend"]

log = logging.getLogger("stack")


class BubblewrapConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    python: Path = Field(default=DEFAULT_VENV / "bin" / "python",
                         description="The runtime venv's interpreter, which runs the code (`stack sandbox setup` makes it)")
    directory: Path | None = Field(default=None, description="Where the sandboxes' /mnt/data directories are (default: <state_dir>/sandboxes)")
    max_memory: Literal["1g", "4g", "16g", "64g"] = Field(
        default="4g", description="The largest memory limit a sandbox may have (capped at what the host has)")
    cell_timeout_s: float = Field(default=60.0, gt=0, description="A cell running longer is interrupted (status `timeout`)")
    cpu_s: int = Field(default=600, ge=1, description="CPU seconds a kernel may use in all (RLIMIT_CPU); past it the kernel is killed")
    max_processes: int = Field(default=64, ge=4, description="Processes and threads a sandbox may have at once")
    max_file_bytes: int = Field(default=1 << 30, ge=1, description="The largest file code may write (RLIMIT_FSIZE)")
    max_output_bytes: int = Field(default=64 * 1024, ge=1024, description="A cell's logs are cut at this many bytes")
    idle_stop_s: float | None = Field(default=None, gt=0, description="Stop a kernel that ran no cell for this long (its files stay)")
    allowed_hosts: list[str] = Field(default_factory=list, description=(
        "Hosts a container's network_policy may allow its code to reach, through a proxy: `pypi.org`, `*.example.com` (every "
        "name under it), with `:port` for a port other than 443 and 80. Empty: no sandbox has network"))
    allow_private: list[str] = Field(default_factory=list, description=(
        "Non-public hosts or networks (names, addresses, CIDR) the proxy may dial for an allowed host; public addresses are "
        "always allowed, and nothing else is unless listed here"))

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            parse_host_rule(host)  # its ValueError says what is wrong with the entry
        return hosts


def host_memory_bytes() -> int:
    """MemTotal of /proc/meminfo."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


def _settings(config: BubblewrapConfig, state_dir: Path) -> Settings:
    bwrap = find_bwrap()
    try:
        runtime = inspect_runtime(config.python.expanduser())
    except RuntimeError as error:
        raise IsolationError(f"{error}. {ALTERNATIVES}") from None
    directory = (config.directory or state_dir / "sandboxes").expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    cgroups = PidsCgroups.find()
    if cgroups.base is None:
        # Without a pids cgroup only RLIMIT_NPROC limits a fork bomb, and it counts the processes of
        # the real uid: it holds for a server that runs as a user of its own, never for root.
        if os.geteuid() == 0:
            raise IsolationError("sandboxes: the server runs as root and no pids cgroup can be made here (/sys/fs/cgroup is "
                                 "read-only or has no pids controller), so nothing would stop a fork bomb in a sandbox. Run the "
                                 f"server as an unprivileged user, or give it a writable pids cgroup. {ALTERNATIVES}")
        log.warning("sandboxes: no pids cgroup can be made here: a sandbox's processes are limited by RLIMIT_NPROC, "
                    "which counts every process of the server's user")
    return Settings(bwrap=bwrap, runtime=runtime, directory=directory,
                    max_memory_bytes=min(MEMORY_TIERS[config.max_memory], host_memory_bytes()),
                    cell_timeout_s=config.cell_timeout_s, cpu_s=config.cpu_s, max_processes=config.max_processes,
                    max_file_bytes=config.max_file_bytes, max_output_bytes=config.max_output_bytes, cgroups=cgroups,
                    allowed_hosts=tuple(parse_host_rule(host) for host in config.allowed_hosts),
                    guard=AddressPolicy(config.allow_private).allows)


@contextlib.asynccontextmanager
async def open_backend(config: BubblewrapConfig, state_dir: Path, *, verify: bool = True) -> AsyncIterator[BubblewrapSandboxes]:
    """The backend, its isolation proven (unless `verify` is off), its kernels killed at the end."""
    settings = await asyncio.to_thread(_settings, config, state_dir)
    backend = BubblewrapSandboxes(settings)
    backend.kernels.watch_idle(config.idle_stop_s)
    try:
        if verify:
            await verify_isolation(backend, state_dir)
        yield backend
    finally:
        await backend.close()


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BubblewrapConfig]) -> AsyncIterator[BubblewrapSandboxes]:
    async with open_backend(context.config, context.state_dir) as backend:
        yield backend


BUBBLEWRAP = ProviderSpec(
    api=Api.sandboxes,
    name="bubblewrap",
    config_model=BubblewrapConfig,
    factory=create,
    description="Sandboxes as bubblewrap processes on the server's host (Linux user namespaces; no daemon)",
)
