"""Sandboxes as Docker containers, through the Docker Engine API (a unix socket by default).

For hosts where bubblewrap cannot run (no user namespaces) or where the operator wants the code in
an image of their choosing. The isolation is the Engine's: no network (`NetworkMode: none`), an
unprivileged user, no capabilities, `no-new-privileges`, and its cgroups for memory and processes.
At start the provider makes a probe container and checks that the Engine kept every one of these
settings (an Engine without pids or memory cgroups says so in its warnings), or it does not start.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Literal

import httpx2
from pydantic import BaseModel, ConfigDict, Field

from contract.sandboxes.protocol import MEMORY_TIERS
from contract.spec import Api, HttpClientFactory, ProviderContext, ProviderSpec
from providers.sandboxes.docker.backend import ContainerSettings, DockerSandboxes
from providers.sandboxes.docker.engine import EngineError, check, engine_client

__all__ = ["DOCKER", "DockerConfig", "DockerSandboxes", "open_backend"]


class DockerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(default="unix:///var/run/docker.sock", description="The Engine: `unix:///path/docker.sock` or `http://host:port`")
    image: str = Field(default="python:3.12-slim", description="The sandboxes' image: it needs Python (and the packages the code may import)")
    python: str = Field(default="python3", description="The interpreter in the image")
    max_memory: Literal["1g", "4g", "16g", "64g"] = Field(default="4g", description="The largest memory limit a sandbox may have")
    cell_timeout_s: float = Field(default=60.0, gt=0, description="A cell running longer is interrupted (status `timeout`)")
    cpu_s: int = Field(default=600, ge=1, description="CPU seconds a kernel may use in all (RLIMIT_CPU); past it the kernel is killed")
    max_processes: int = Field(default=64, ge=4, description="Processes and threads a sandbox may have at once (the pids cgroup)")
    max_file_bytes: int = Field(default=1 << 30, ge=1, description="The largest file code may write (RLIMIT_FSIZE)")
    max_output_bytes: int = Field(default=64 * 1024, ge=1024, description="A cell's logs are cut at this many bytes")
    request_timeout_s: float = Field(default=120.0, gt=0, description="How long a call to the Engine may take (a file's archive)")


_KEPT = {"NetworkMode": "none", "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"]}


async def verify(backend: DockerSandboxes) -> None:
    """A probe container, inspected: the Engine must have kept the isolation asked of it."""
    try:
        await check(await backend.client.get("/_ping"))
        await check(await backend.client.get(f"/images/{backend.settings.image}/json"))
    except (EngineError, httpx2.TransportError) as error:
        raise RuntimeError(f"the Docker sandboxes cannot start: {error!s} (is the Engine at {backend.settings.url} running, "
                           f"and the image pulled: `docker pull {backend.settings.image}`?)") from None
    probe = "probe"
    name = backend.name(probe)
    config = backend.container_config(probe, min(backend.max_memory_bytes, 1 << 30))
    await backend.destroy(probe)
    try:
        created = await check(await backend.client.post("/containers/create", params={"name": name}, json=config))
        inspected = await check(await backend.client.get(f"/containers/{name}/json"))
    finally:
        await backend.destroy(probe)
    host = inspected.get("HostConfig", {})
    failed = [f"{key} is {host.get(key)!r}" for key, value in _KEPT.items() if host.get(key) != value]
    failed += [f"{key} is {host.get(key)!r}" for key in ("Memory", "PidsLimit") if host.get(key) != config["HostConfig"][key]]
    if inspected.get("Config", {}).get("User") != config["User"]:
        failed.append(f"the user is {inspected.get('Config', {}).get('User')!r}")
    failed += [f"the Engine warned: {warning}" for warning in created.get("Warnings") or ()]
    if failed:
        raise RuntimeError("the Docker Engine does not isolate the sandboxes as asked: " + "; ".join(failed)
                           + ". Use the `bubblewrap` sandboxes provider instead, or fix the Engine.")


@contextlib.asynccontextmanager
async def open_backend(config: DockerConfig, make_client: HttpClientFactory | None = None) -> AsyncIterator[DockerSandboxes]:
    """The backend, verified, its kernels killed (their containers stopped) at the end."""
    client = engine_client(config.url, make_client, config.request_timeout_s)
    settings = ContainerSettings(url=config.url, image=config.image, python=config.python, max_memory_bytes=MEMORY_TIERS[config.max_memory],
                                 cell_timeout_s=config.cell_timeout_s, cpu_s=config.cpu_s, max_processes=config.max_processes,
                                 max_file_bytes=config.max_file_bytes, max_output_bytes=config.max_output_bytes)
    backend = DockerSandboxes(client, settings)
    try:
        await verify(backend)
        yield backend
    finally:
        await backend.close()
        await client.aclose()


@contextlib.asynccontextmanager
async def create(context: ProviderContext[DockerConfig]) -> AsyncIterator[DockerSandboxes]:
    async with open_backend(context.config, context.http_client) as backend:
        yield backend


DOCKER = ProviderSpec(
    api=Api.sandboxes,
    name="docker",
    config_model=DockerConfig,
    factory=create,
    description="Sandboxes as Docker containers (the Docker Engine API; no network, an unprivileged user, cgroup limits)",
)
