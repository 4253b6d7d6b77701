"""Sandboxes as Docker containers: one container per sandbox, its main process the kernel.

`create` makes the container (not started) and its /mnt/data; the first cell attaches to it and
starts it; a kernel killed (a timeout, a limit) leaves the container stopped, and the next cell
starts it again: a fresh kernel, the same files (they live in the container's own layer).
No network, ever: the Engine may be on another host, where no proxy socket of the server's could be
mounted, so this backend allows no hosts and refuses a sandbox with `allowed_domains`.
The driver is given as `python -c <source>`, so the image needs nothing of ours, only Python.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.network import HostRule, check_allowed_domains
from contract.sandboxes.protocol import CellOutput, HeldSandbox, SandboxFile
from providers.sandboxes.data_dir import check_sandbox_id, split_path
from providers.sandboxes.docker.archive import SANDBOX_UID, data_dir_tar, file_tar, listing, single_file
from providers.sandboxes.docker.engine import EngineError, attach, check
from providers.sandboxes.kernel_client import DRIVER, Kernel, KernelDied, Kernels, kernel_arguments

__all__ = ["ContainerSettings", "DockerSandboxes"]

START_TIMEOUT_S = 60.0
LABEL = "stack.sandbox"
"""The label every sandbox container has, its value the sandbox id (what `held` lists)."""
_UNLINK = ("import os, stat, sys\ntry:\n    info = os.lstat(sys.argv[1])\nexcept FileNotFoundError:\n    sys.exit(2)\n"
           "sys.exit(3) if not stat.S_ISREG(info.st_mode) else os.unlink(sys.argv[1])")


@dataclass(frozen=True)
class ContainerSettings:
    url: str
    image: str
    python: str
    max_memory_bytes: int
    cell_timeout_s: float
    cpu_s: int
    max_processes: int
    max_file_bytes: int
    max_output_bytes: int


class DockerSandboxes:
    """Implements contract.sandboxes.protocol.SandboxBackend."""

    def __init__(self, client: httpx2.AsyncClient, settings: ContainerSettings) -> None:
        self.client = client
        self.settings = settings
        self.kernels = Kernels(self._start)
        self._driver = DRIVER.read_text()

    @property
    def max_memory_bytes(self) -> int:
        return self.settings.max_memory_bytes

    @staticmethod
    def name(sandbox_id: str) -> str:
        return f"stack-sandbox-{check_sandbox_id(sandbox_id)}"

    def container_config(self, sandbox_id: str, memory_bytes: int) -> dict[str, Any]:
        """No network, no capability, an unprivileged user, and the Engine's own limits (a cgroup each)."""
        s = self.settings
        argument = kernel_arguments(max_output_bytes=s.max_output_bytes, memory_bytes=0, cpu_s=s.cpu_s,
                                    max_file_bytes=s.max_file_bytes, max_processes=0)
        return {
            "Image": s.image, "Cmd": [s.python, "-B", "-c", self._driver, argument], "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
            "WorkingDir": "/mnt/data", "OpenStdin": True, "StdinOnce": False, "AttachStdin": True, "AttachStdout": True,
            "AttachStderr": True, "Tty": False, "NetworkDisabled": True, "Labels": {LABEL: sandbox_id},
            "Env": ["HOME=/mnt/data", "LANG=C.UTF-8", "MPLBACKEND=Agg", "PYTHONDONTWRITEBYTECODE=1", "MPLCONFIGDIR=/tmp/matplotlib",
                    "XDG_CACHE_HOME=/tmp/cache"],
            "HostConfig": {
                "NetworkMode": "none", "Memory": memory_bytes, "MemorySwap": memory_bytes, "PidsLimit": s.max_processes,
                "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"], "Tmpfs": {"/tmp": f"size={memory_bytes},mode=1777"},
                "Ulimits": [{"Name": "cpu", "Soft": s.cpu_s, "Hard": s.cpu_s},
                            {"Name": "fsize", "Soft": s.max_file_bytes, "Hard": s.max_file_bytes}],
            },
        }

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        return ()

    async def create(self, sandbox_id: str, memory_bytes: int, allowed_domains: Sequence[str] = ()) -> None:
        if allowed_domains:
            check_allowed_domains(list(allowed_domains), self.allowed_hosts, "network_policy.allowed_domains")  # refuses: no hosts
        if not 0 < memory_bytes <= self.max_memory_bytes:
            raise InvalidRequestError(f"A sandbox's memory must be at most {self.max_memory_bytes} bytes on this server.",
                                      param="memory_limit", code="invalid_value")
        name = self.name(sandbox_id)
        await check(await self.client.post("/containers/create", params={"name": name},
                                           json=self.container_config(sandbox_id, memory_bytes)))
        await self._put_archive(name, "/", data_dir_tar())

    async def _put_archive(self, name: str, path: str, tar: bytes) -> None:
        response = await self.client.put(f"/containers/{name}/archive", params={"path": path, "copyUIDGID": "1"}, content=tar,
                                         headers={"Content-Type": "application/x-tar"})
        await self._check(response, name)

    async def _check(self, response: httpx2.Response, name: str) -> Any:
        try:
            return await check(response)
        except EngineError as error:
            if error.status == 404:
                raise NotFoundError(f"No such sandbox, or no such file in it ({name}).", code="not_found") from None
            raise

    async def _kill(self, name: str) -> None:
        with contextlib.suppress(EngineError):
            await check(await self.client.post(f"/containers/{name}/kill", params={"signal": "SIGKILL"}))

    async def _start(self, sandbox_id: str) -> Kernel:
        name = self.name(sandbox_id)

        async def kill() -> None:
            await self._kill(name)

        await self._kill(name)  # a container left running by another process (or a restart) is not ours to talk to
        try:
            pipe = await attach(self.settings.url, name, kill)
        except EngineError as error:
            if error.status == 404:
                raise NotFoundError(f"No such sandbox: {sandbox_id}", param="sandbox_id", code="not_found") from None
            raise
        try:
            await self._check(await self.client.post(f"/containers/{name}/start"), name)
        except BaseException:
            await pipe.kill()
            raise
        kernel = Kernel(pipe, self.settings.cell_timeout_s)
        try:
            await kernel.started(START_TIMEOUT_S)
        except KernelDied as error:
            raise RuntimeError(f"the sandbox {sandbox_id}'s kernel did not start in its container: {error}") from None
        return kernel

    async def run(self, sandbox_id: str, code: str) -> CellOutput:
        return await self.kernels.run(sandbox_id, code)

    async def stop(self, sandbox_id: str) -> None:
        await self.kernels.stop(check_sandbox_id(sandbox_id))

    async def destroy(self, sandbox_id: str) -> None:
        await self.stop(sandbox_id)
        with contextlib.suppress(NotFoundError):
            await self._check(await self.client.delete(f"/containers/{self.name(sandbox_id)}", params={"force": "1", "v": "1"}),
                              sandbox_id)

    async def held(self) -> list[HeldSandbox]:
        listed = await check(await self.client.get("/containers/json", params={"all": "1", "filters": json.dumps({"label": [LABEL]})}))
        return [HeldSandbox(str(entry["Labels"][LABEL]), float(entry.get("Created") or 0)) for entry in listed
                if isinstance(entry, dict) and isinstance(entry.get("Labels"), dict) and entry["Labels"].get(LABEL)]

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> SandboxFile:
        parts = split_path(path)
        await self._put_archive(self.name(sandbox_id), "/mnt/data", file_tar(parts, data))
        return SandboxFile("/".join(parts), len(data), 0)

    async def _archive(self, sandbox_id: str, path: str) -> bytes:
        name = self.name(sandbox_id)
        response = await self.client.get(f"/containers/{name}/archive", params={"path": path})
        await self._check(response, name)
        return response.content

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        parts = split_path(path)
        data = single_file(await self._archive(sandbox_id, "/mnt/data/" + "/".join(parts)), path)
        for start in range(0, len(data), 1 << 20):
            yield data[start:start + (1 << 20)]

    async def list_files(self, sandbox_id: str) -> list[SandboxFile]:
        return listing(await self._archive(sandbox_id, "/mnt/data"))

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        """By an exec in the container (the Engine has no call that deletes a file); a stopped one is
        started for it, without its kernel's pipe, and stopped again."""
        relative = "/".join(split_path(path))
        name = self.name(sandbox_id)
        exec_config = {"Cmd": [self.settings.python, "-c", _UNLINK, relative], "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
                       "WorkingDir": "/mnt/data", "AttachStdout": True, "AttachStderr": True}
        started_here = sandbox_id not in self.kernels.running()
        if started_here:
            await self._check(await self.client.post(f"/containers/{name}/start"), name)
        try:
            created = await self._check(await self.client.post(f"/containers/{name}/exec", json=exec_config), name)
            await check(await self.client.post(f"/exec/{created['Id']}/start", json={"Detach": False, "Tty": False}))
            code = (await check(await self.client.get(f"/exec/{created['Id']}/json")))["ExitCode"]
        finally:
            if started_here:
                await self._kill(name)
        if code == 2:
            raise NotFoundError(f"No such file in the sandbox: {path!r:.200}", param="path", code="not_found")
        if code != 0:
            raise InvalidRequestError(f"{path!r:.200} is not a regular file.", param="path", code="invalid_value")

    async def close(self) -> None:
        await self.kernels.stop_all()
