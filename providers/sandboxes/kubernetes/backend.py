"""Sandboxes as Kubernetes pods: one pod per sandbox, its kernel an exec in it.

`create` makes the pod and waits until its container runs; the first cell execs the driver in it
(`python -c`, the image needs only Python); a kernel killed (a timeout, a limit) is replaced by a
new exec, in the same pod, with the same files (its emptyDir). Files move through short execs of
`scripts`. `destroy` deletes the pod, and its files with it.
No hosts are allowed: the pods' egress is the cluster's NetworkPolicy to close, and no proxy of the
server's reaches into a pod, so a sandbox with `allowed_domains` is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
from websockets.exceptions import WebSocketException

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.network import HostRule, check_allowed_domains
from contract.sandboxes.protocol import CellOutput, HeldSandbox, SandboxFile
from providers.sandboxes.data_dir import CHUNK, check_sandbox_id, split_path
from providers.sandboxes.kernel_client import DRIVER, Kernel, KernelDied, Kernels, kernel_arguments
from providers.sandboxes.kubernetes import scripts
from providers.sandboxes.kubernetes.api import ApiError, Cluster, check
from providers.sandboxes.kubernetes.exec import Completed, ExecPipe, open_exec, run_command
from providers.sandboxes.kubernetes.pod import LABELS, PodSettings, pod_manifest, pod_name

__all__ = ["KubernetesSandboxes"]

START_TIMEOUT_S = 60.0
_STUCK = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
          "CrashLoopBackOff", "RunContainerError"}
"""Waiting reasons that do not pass by themselves: a pod in one is not waited for."""


def _gone(sandbox_id: str) -> NotFoundError:
    return NotFoundError(f"No such sandbox (its pod is gone): {sandbox_id}", param="sandbox_id", code="not_found")


def _state(pod: dict[str, Any]) -> tuple[str, str]:
    """(`running`, `failed` or `waiting`, what it says) for the pod's container."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return "failed", f"the pod is {status['phase']}: {status.get('reason', '')} {status.get('message', '')}".strip()
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        if "running" in state:
            return "running", "running"
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            return "failed", f"its container is {waiting['reason']}: {waiting.get('message', '')}".strip()
    return "waiting", f"the pod is {status.get('phase', 'not scheduled yet')}"


class KubernetesSandboxes:
    """Implements contract.sandboxes.protocol.SandboxBackend."""

    def __init__(self, cluster: Cluster, client: httpx2.AsyncClient, settings: PodSettings) -> None:
        self.cluster, self.client, self.settings = cluster, client, settings
        self.kernels = Kernels(self._start)
        self._driver = DRIVER.read_text()

    @property
    def max_memory_bytes(self) -> int:
        return self.settings.max_memory_bytes

    @property
    def pods(self) -> str:
        """The path of the namespace's pods in the API."""
        return f"/api/v1/namespaces/{self.settings.namespace}/pods"

    def manifest(self, sandbox_id: str, memory_bytes: int) -> dict[str, Any]:
        return pod_manifest(self.settings, sandbox_id, memory_bytes)

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        return ()

    async def create(self, sandbox_id: str, memory_bytes: int, allowed_domains: Sequence[str] = ()) -> None:
        if allowed_domains:
            check_allowed_domains(list(allowed_domains), self.allowed_hosts, "network_policy.allowed_domains")  # refuses: no hosts
        if not 0 < memory_bytes <= self.max_memory_bytes:
            raise InvalidRequestError(f"A sandbox's memory must be at most {self.max_memory_bytes} bytes on this server.",
                                      param="memory_limit", code="invalid_value")
        await check(await self.client.post(self.pods, json=self.manifest(sandbox_id, memory_bytes)))
        try:
            await self._wait_running(sandbox_id)
        except BaseException:
            with contextlib.suppress(ApiError, httpx2.TransportError):
                await self._delete(sandbox_id)
            raise

    async def _wait_running(self, sandbox_id: str) -> None:
        name, pause, said = pod_name(sandbox_id), 0.05, "no answer"
        try:
            async with asyncio.timeout(self.settings.pod_start_timeout_s):
                while True:
                    state, said = _state(await check(await self.client.get(f"{self.pods}/{name}")))
                    if state == "running":
                        return
                    if state == "failed":
                        raise RuntimeError(f"the sandbox {sandbox_id}'s pod {name} did not start: {said}")
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 1.0)
        except TimeoutError:
            raise RuntimeError(f"the sandbox {sandbox_id}'s pod {name} did not start in "
                               f"{self.settings.pod_start_timeout_s:g} s: {said}") from None

    async def _delete(self, sandbox_id: str) -> None:
        await check(await self.client.delete(f"{self.pods}/{pod_name(sandbox_id)}", params={"gracePeriodSeconds": "0"}))

    async def _exec(self, sandbox_id: str, script: str, *arguments: str, stdin: bytes = b"") -> Completed:
        command = [self.settings.python, "-B", "-c", script, *arguments]
        try:
            async with asyncio.timeout(self.settings.request_timeout_s):
                return await run_command(self.cluster, self.settings.namespace, pod_name(sandbox_id), command, stdin,
                                         self.settings.request_timeout_s)
        except ApiError as error:
            if error.status == 404:
                raise _gone(sandbox_id) from None
            raise

    async def _kill_group(self, sandbox_id: str, group: int) -> None:
        with contextlib.suppress(ApiError, OSError, TimeoutError, NotFoundError, WebSocketException):
            await self._exec(sandbox_id, scripts.KILL, str(group))

    async def _start(self, sandbox_id: str) -> Kernel:
        s = self.settings
        argument = kernel_arguments(max_output_bytes=s.max_output_bytes, memory_bytes=0, cpu_s=s.cpu_s,
                                    max_file_bytes=s.max_file_bytes, max_processes=0)
        command = [s.python, "-B", "-c", scripts.BOOT, self._driver, argument]
        try:
            stream = await open_exec(self.cluster, s.namespace, pod_name(sandbox_id), command, s.request_timeout_s)
        except ApiError as error:
            if error.status == 404:
                raise _gone(sandbox_id) from None
            raise
        pipe = ExecPipe(stream)
        kernel = Kernel(pipe, s.cell_timeout_s)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                group = int.from_bytes(await pipe.receive(4), "big")
            pipe.on_kill = lambda: self._kill_group(sandbox_id, group)
            await kernel.started(START_TIMEOUT_S)
        except (KernelDied, TimeoutError) as error:
            await pipe.kill()
            raise RuntimeError(f"the sandbox {sandbox_id}'s kernel did not start in its pod: {error or 'no answer in time'}") from None
        return kernel

    async def run(self, sandbox_id: str, code: str) -> CellOutput:
        return await self.kernels.run(sandbox_id, code)

    async def stop(self, sandbox_id: str) -> None:
        await self.kernels.stop(check_sandbox_id(sandbox_id))

    async def destroy(self, sandbox_id: str) -> None:
        await self.stop(sandbox_id)
        try:
            await self._delete(sandbox_id)
        except ApiError as error:
            if error.status != 404:
                raise

    async def held(self) -> list[HeldSandbox]:
        selector = ",".join(f"{key}={value}" for key, value in LABELS.items())
        listed = await check(await self.client.get(self.pods, params={"labelSelector": selector}))
        held = []
        for pod in listed.get("items") or ():
            metadata = pod.get("metadata") or {}
            sandbox_id = (metadata.get("annotations") or {}).get("stack.sandbox/id")
            if isinstance(sandbox_id, str) and sandbox_id:
                held.append(HeldSandbox(sandbox_id, _epoch(metadata.get("creationTimestamp"))))
        return held

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> SandboxFile:
        relative = "/".join(split_path(path))
        done = scripts.check_exit(await self._exec(sandbox_id, scripts.WRITE, relative, str(len(data)), stdin=data), path)
        size, modified_ns = json.loads(done.stdout)
        return SandboxFile(relative, int(size), int(modified_ns))

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        done = scripts.check_exit(await self._exec(sandbox_id, scripts.READ, "/".join(split_path(path))), path)
        for start in range(0, len(done.stdout), CHUNK):
            yield done.stdout[start:start + CHUNK]

    async def list_files(self, sandbox_id: str) -> list[SandboxFile]:
        return scripts.listing(await self._exec(sandbox_id, scripts.LIST))

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        scripts.check_exit(await self._exec(sandbox_id, scripts.DELETE, "/".join(split_path(path))), path)

    async def close(self) -> None:
        await self.kernels.stop_all()


def _epoch(stamp: object) -> float:
    """An RFC 3339 timestamp of the API (`2026-11-29T04:00:00Z`) in seconds since the epoch; 0 if it has none."""
    if not isinstance(stamp, str):
        return 0.0
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
