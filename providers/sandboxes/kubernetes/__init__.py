"""Sandboxes as Kubernetes pods, through the Kubernetes API (in-cluster by default: the server's own
service account).

For a server that runs in a cluster, or wants its sandboxes on nodes of their own. The isolation is
the pod's: an unprivileged user (65534, `runAsNonRoot`), no capabilities, no privilege escalation,
a read-only root, the RuntimeDefault seccomp profile, no service account token, the cgroup memory
limit, and a runtime class of the operator's choosing (gVisor, Kata) for a kernel of its own. The
network is the cluster's to close: a NetworkPolicy that denies the pods' egress (they carry
`pod.LABELS`). At start the provider checks that the API answers, that it would create a pod in
the namespace as asked (a dry run), keeping every setting that isolates it, and that such a policy
is there, or it does not start.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import httpx2
from pydantic import BaseModel, ConfigDict, Field

from contract.sandboxes.protocol import MEMORY_TIERS
from contract.spec import Api, ProviderContext, ProviderSpec
from providers.sandboxes.kubernetes.api import ApiError, Cluster, check
from providers.sandboxes.kubernetes.backend import KubernetesSandboxes
from providers.sandboxes.kubernetes.network import egress_problem
from providers.sandboxes.kubernetes.pod import PodSettings, not_kept

__all__ = ["KUBERNETES", "KubernetesConfig", "KubernetesSandboxes", "open_backend"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_QUANTITY = r"^[0-9]+(\.[0-9]+)?m?$"


class KubernetesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(default="https://kubernetes.default.svc", description="The Kubernetes API (in a pod: the cluster's own)")
    namespace: str | None = Field(default=None, description="Where the sandboxes' pods go (default: the service account's namespace)")
    token_file: Path | None = Field(default=SERVICE_ACCOUNT / "token", description="The bearer token (re-read every minute: it rotates)")
    ca_file: Path | None = Field(default=SERVICE_ACCOUNT / "ca.crt", description="The CA of the API's certificate (None: the system's)")
    image: str = Field(default="python:3.12-slim", description="The sandboxes' image: Python and the packages the code may import")
    python: str = Field(default="python3", description="The interpreter in the image")
    max_memory: Literal["1g", "4g", "16g", "64g"] = Field(default="4g", description="The largest memory limit a sandbox may have")
    cell_timeout_s: float = Field(default=60.0, gt=0, description="A cell running longer is interrupted (status `timeout`)")
    cpu_s: int = Field(default=600, ge=1, description="CPU seconds a kernel may use in all (RLIMIT_CPU); past it the kernel is killed")
    max_file_bytes: int = Field(default=1 << 30, ge=1, description="The largest file code may write (RLIMIT_FSIZE)")
    max_output_bytes: int = Field(default=64 * 1024, ge=1024, description="A cell's logs are cut at this many bytes")
    max_data_bytes: int = Field(default=4 << 30, ge=1 << 20, description="The sizeLimit of /mnt/data (past it the kubelet evicts the pod)")
    cpu_limit: str = Field(default="1", pattern=_QUANTITY, description="A sandbox's CPU limit (a Kubernetes quantity)")
    cpu_request: str = Field(default="100m", pattern=_QUANTITY, description="The CPU a sandbox's pod requests of its node")
    pod_start_timeout_s: float = Field(default=120.0, gt=0, description="How long `create` waits for a pod to run (an image pull)")
    request_timeout_s: float = Field(default=120.0, gt=0, description="How long a call to the API (or a file's exec) may take")
    active_deadline_s: int | None = Field(default=None, ge=1, description="The pods' activeDeadlineSeconds: ended this long after start")
    runtime_class_name: str | None = Field(default=None, description="The pods' runtimeClassName (`gvisor`, `kata`: a kernel of their own)")
    labels: dict[str, str] = Field(default_factory=dict, description="More labels on the pods (a NetworkPolicy's selector)")
    check_network_policy: bool = Field(default=True, description=(
        "Refuse to start unless a NetworkPolicy in the namespace denies the pods egress (off: the cluster closes it otherwise)"))
    idle_stop_s: float | None = Field(default=None, gt=0, description="Stop a kernel that ran no cell for this long (its pod stays)")


def _namespace(config: KubernetesConfig) -> str:
    if config.namespace:
        return config.namespace
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text().strip()
    except OSError:
        raise RuntimeError("the Kubernetes sandboxes need a `namespace` (the server is not in a pod: "
                           f"{SERVICE_ACCOUNT / 'namespace'} is missing)") from None


def _settings(config: KubernetesConfig) -> PodSettings:
    return PodSettings(namespace=_namespace(config), image=config.image, python=config.python,
                       max_memory_bytes=MEMORY_TIERS[config.max_memory], cell_timeout_s=config.cell_timeout_s, cpu_s=config.cpu_s,
                       max_file_bytes=config.max_file_bytes, max_output_bytes=config.max_output_bytes,
                       max_data_bytes=config.max_data_bytes, cpu_limit=config.cpu_limit, cpu_request=config.cpu_request,
                       pod_start_timeout_s=config.pod_start_timeout_s, request_timeout_s=config.request_timeout_s,
                       active_deadline_s=config.active_deadline_s, runtime_class_name=config.runtime_class_name,
                       labels=dict(config.labels))


async def verify(backend: KubernetesSandboxes, check_network_policy: bool = True) -> None:
    """The API answers, a dry run of a sandbox's pod is accepted with what isolates it kept, and (unless
    told not to check) a NetworkPolicy denies the pods egress."""
    namespace = backend.settings.namespace
    asked = backend.manifest("probe", min(backend.max_memory_bytes, 1 << 30))
    try:
        await check(await backend.client.get("/version"))
        got = await check(await backend.client.post(backend.pods, params={"dryRun": "All"}, json=asked))
    except (ApiError, httpx2.TransportError, OSError) as error:
        raise RuntimeError(f"the Kubernetes sandboxes cannot start: {error!s} (is the API at {backend.cluster.api_url} reachable, "
                           f"does the namespace {namespace!r} exist, and may the service account create pods and pods/exec "
                           "in it?)") from None
    failed = not_kept(asked, got)
    if failed:
        raise RuntimeError(f"the Kubernetes API would not isolate the sandboxes' pods in {namespace!r} as asked: "
                           + "; ".join(failed) + " (a mutating admission webhook?). Fix the cluster, or use another sandboxes provider.")
    if check_network_policy:
        await _verify_network_policy(backend, asked["metadata"]["labels"])


async def _verify_network_policy(backend: KubernetesSandboxes, labels: dict[str, str]) -> None:
    namespace = backend.settings.namespace
    try:
        listed = await check(await backend.client.get(f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"))
    except (ApiError, httpx2.TransportError) as error:
        raise RuntimeError(f"the Kubernetes sandboxes cannot tell whether their pods have network: {error!s} (give the service "
                           "account `list` on networkpolicies, or set `check_network_policy: false`)") from None
    problem = egress_problem(listed.get("items") or [], labels, namespace)
    if problem:
        raise RuntimeError(f"the Kubernetes sandboxes would have network: {problem}. Add such a NetworkPolicy (docs/sandboxes.md), "
                           "or set `check_network_policy: false` if the cluster closes the pods' egress otherwise.")


@contextlib.asynccontextmanager
async def open_backend(config: KubernetesConfig) -> AsyncIterator[KubernetesSandboxes]:
    """The backend, verified, its kernels killed at the end (the pods stay: the containers API destroys them)."""
    cluster = Cluster(config.api_url, config.token_file, config.ca_file)
    client = cluster.client(config.request_timeout_s)
    backend = KubernetesSandboxes(cluster, client, _settings(config))
    backend.kernels.watch_idle(config.idle_stop_s)
    try:
        await verify(backend, config.check_network_policy)
        yield backend
    finally:
        await backend.close()
        await client.aclose()


@contextlib.asynccontextmanager
async def create(context: ProviderContext[KubernetesConfig]) -> AsyncIterator[KubernetesSandboxes]:
    async with open_backend(context.config) as backend:
        yield backend


KUBERNETES = ProviderSpec(
    api=Api.sandboxes,
    name="kubernetes",
    config_model=KubernetesConfig,
    factory=create,
    description="Sandboxes as Kubernetes pods (the Kubernetes API; an unprivileged user, a read-only root, a memory limit)",
)
