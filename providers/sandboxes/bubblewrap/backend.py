"""Sandboxes as bwrap processes on the server's own host: one kernel process per sandbox.

Layout under `directory`: `<id>/data` is the sandbox's /mnt/data, `<id>/memory_bytes` its memory
limit and `<id>/allowed_domains` (when it has network) the domains it may reach, one a line (so that
a kernel started after a restart gets what it was created with). A kernel with domains gets its
proxy (`providers/sandboxes/egress.py`), which lives and dies with it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.network import HostRule, check_allowed_domains, parse_host_rule
from contract.sandboxes.protocol import CellOutput, HeldSandbox, SandboxFile
from contract.spec import AddressGuard
from providers.sandboxes.bubblewrap.cgroups import PidsCgroups
from providers.sandboxes.bubblewrap.command import PROXY_PORT, PROXY_SOCKET, Runtime, bwrap_command
from providers.sandboxes.data_dir import DataDir, check_sandbox_id
from providers.sandboxes.egress import EgressProxy
from providers.sandboxes.kernel_client import Kernel, KernelDied, Kernels, kernel_arguments
from runtime.security.netguard import AddressPolicy

__all__ = ["BubblewrapSandboxes", "Settings"]

log = logging.getLogger("stack")

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Settings:
    """What the backend needs of its config, resolved on this host."""

    bwrap: str
    runtime: Runtime
    directory: Path
    max_memory_bytes: int
    cell_timeout_s: float
    cpu_s: int
    max_processes: int
    max_file_bytes: int
    max_output_bytes: int
    cgroups: PidsCgroups
    allowed_hosts: tuple[HostRule, ...] = ()
    """The operator's hosts; none: no sandbox has network."""
    guard: AddressGuard = field(default_factory=lambda: AddressPolicy().allows)
    """Which addresses the proxies may dial: public ones, unless the operator's `allow_private` adds some."""


class _ProcessPipe:
    """A bwrap process's stdin and stdout; its stderr (the code's own writes to fd 2) is drained, the last of it kept."""

    def __init__(self, process: asyncio.subprocess.Process, cgroups: PidsCgroups, cgroup: Path | None,
                 proxy: EgressProxy | None = None) -> None:
        self.process = process
        self.cgroups = cgroups
        self.cgroup = cgroup
        self.proxy = proxy
        self.stderr: collections.deque[bytes] = collections.deque(maxlen=16)
        self._drain = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.read(4096):
            self.stderr.append(chunk)

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(data)
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise KernelDied("its input is closed") from error

    async def receive(self, size: int) -> bytes:
        assert self.process.stdout is not None
        try:
            return await self.process.stdout.readexactly(size)
        except asyncio.IncompleteReadError:
            raise KernelDied(self.last_words() or "it exited") from None

    def last_words(self) -> str:
        return b"".join(self.stderr).decode(errors="replace").strip()[-500:]

    async def kill(self) -> None:
        # bwrap's --die-with-parent takes the PID namespace, and everything in it, down with it.
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()
        self._drain.cancel()
        if self.proxy is not None:
            await self.proxy.close()
        await asyncio.to_thread(self.cgroups.remove, self.cgroup)


class BubblewrapSandboxes:
    """Implements contract.sandboxes.protocol.SandboxBackend."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kernels = Kernels(self._start)

    @property
    def max_memory_bytes(self) -> int:
        return self.settings.max_memory_bytes

    def _place(self, sandbox_id: str) -> Path:
        return self.settings.directory / check_sandbox_id(sandbox_id)

    def _data(self, sandbox_id: str) -> DataDir:
        return DataDir(self._place(sandbox_id) / "data")

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        return self.settings.allowed_hosts

    async def create(self, sandbox_id: str, memory_bytes: int, allowed_domains: Sequence[str] = ()) -> None:
        if not 0 < memory_bytes <= self.max_memory_bytes:
            raise InvalidRequestError(f"A sandbox's memory must be at most {self.max_memory_bytes} bytes on this server.",
                                      param="memory_limit", code="invalid_value")
        domains = check_allowed_domains(list(allowed_domains), self.allowed_hosts, "network_policy.allowed_domains") \
            if allowed_domains else ()
        place = self._place(sandbox_id)
        await asyncio.to_thread(self._data(sandbox_id).create)
        if domains:
            await asyncio.to_thread((place / "allowed_domains").write_text, "".join(f"{domain}\n" for domain in domains))
        await asyncio.to_thread((place / "memory_bytes").write_text, str(memory_bytes))

    async def held(self) -> list[HeldSandbox]:
        return await asyncio.to_thread(self._held)

    def _held(self) -> list[HeldSandbox]:
        found = []
        for place in self.settings.directory.iterdir():
            try:
                made = (place / "memory_bytes").stat().st_mtime  # written last by `create`, once
            except OSError:  # not a sandbox, or one being made or removed
                continue
            found.append(HeldSandbox(place.name, made))
        return found

    def _domains(self, sandbox_id: str) -> tuple[HostRule, ...]:
        try:
            lines = (self._place(sandbox_id) / "allowed_domains").read_text().split()
        except FileNotFoundError:
            return ()
        return tuple(parse_host_rule(line, with_port=False) for line in lines)

    def _memory(self, sandbox_id: str) -> int:
        try:
            return min(int((self._place(sandbox_id) / "memory_bytes").read_text()), self.max_memory_bytes)
        except (OSError, ValueError):
            raise NotFoundError(f"No such sandbox: {sandbox_id}", param="sandbox_id", code="not_found") from None

    async def _start(self, sandbox_id: str) -> Kernel:
        settings = self.settings
        memory = await asyncio.to_thread(self._memory, sandbox_id)
        domains = await asyncio.to_thread(self._domains, sandbox_id)
        # The operator's list as it is now: a host the operator no longer allows is not reached.
        proxy = await EgressProxy.open(settings.allowed_hosts, domains, settings.guard) if domains and settings.allowed_hosts else None
        argument = kernel_arguments(max_output_bytes=settings.max_output_bytes, memory_bytes=memory, cpu_s=settings.cpu_s,
                                    max_file_bytes=settings.max_file_bytes, max_processes=settings.max_processes,
                                    proxy=None if proxy is None else (PROXY_SOCKET, PROXY_PORT))
        command = bwrap_command(settings.bwrap, settings.runtime, self._place(sandbox_id) / "data", argument, memory,
                                None if proxy is None else proxy.socket_path)
        try:
            return await self._spawn(sandbox_id, command, proxy)
        except BaseException:
            if proxy is not None:
                await proxy.close()
            raise

    async def _spawn(self, sandbox_id: str, command: list[str], proxy: EgressProxy | None) -> Kernel:
        settings = self.settings
        cgroup = await asyncio.to_thread(settings.cgroups.make, f"{os.getpid()}-{sandbox_id}", settings.max_processes)
        if cgroup is not None:  # the shell joins the cgroup, then becomes bwrap: nothing of the sandbox runs outside it
            command = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *command]
        # A session of its own: the server's Ctrl-C (SIGINT to its process group) must not reach the kernels.
        # No environment either: bwrap's --clearenv clears the kernel's, but bwrap's own process (PID 1
        # inside) would keep the server's in its /proc/1/environ.
        process = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE, start_new_session=True,
                                                       env={"PATH": "/usr/bin:/bin"})
        pipe = _ProcessPipe(process, settings.cgroups, cgroup, proxy)
        kernel = Kernel(pipe, settings.cell_timeout_s)
        try:
            await kernel.started(START_TIMEOUT_S)
        except KernelDied as error:
            raise RuntimeError(f"the sandbox {sandbox_id}'s kernel did not start: {error}; bwrap said: {pipe.last_words()}") from None
        return kernel

    async def run(self, sandbox_id: str, code: str) -> CellOutput:
        await asyncio.to_thread(self._memory, sandbox_id)  # NotFoundError for a sandbox that is not (or no longer) there
        return await self.kernels.run(sandbox_id, code)

    async def stop(self, sandbox_id: str) -> None:
        await self.kernels.stop(check_sandbox_id(sandbox_id))

    async def destroy(self, sandbox_id: str) -> None:
        await self.stop(sandbox_id)
        place = self._place(sandbox_id)
        await asyncio.to_thread(DataDir(place).remove)

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> SandboxFile:
        return await asyncio.to_thread(self._data(sandbox_id).write, path, data)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        async for chunk in self._data(sandbox_id).read(path):
            yield chunk

    async def list_files(self, sandbox_id: str) -> list[SandboxFile]:
        await asyncio.to_thread(self._memory, sandbox_id)
        return await asyncio.to_thread(self._data(sandbox_id).listing)

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        await asyncio.to_thread(self._data(sandbox_id).delete, path)

    async def close(self) -> None:
        """Kill every kernel (at shutdown)."""
        await self.kernels.stop_all()
