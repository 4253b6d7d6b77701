"""A sandbox's pod: its name, its manifest, and the check that the API kept what isolates it.

The container's own process only waits (the kernel is started by an exec, so that a killed kernel
is replaced by another exec and not by a container restart, which the kubelet backs off); its
files are an emptyDir at /mnt/data, which outlives any kernel and goes with the pod.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from providers.sandboxes.data_dir import check_sandbox_id
from providers.sandboxes.kubernetes.exec import CONTAINER

__all__ = ["LABELS", "SANDBOX_UID", "PodSettings", "not_kept", "pod_manifest", "pod_name"]

SANDBOX_UID = 65534
LABELS = {"app.kubernetes.io/name": "stack-sandbox", "app.kubernetes.io/managed-by": "stack"}
"""On every sandbox's pod: what a NetworkPolicy (or a quota, or `kubectl get pods -l`) selects them by."""

# PID 1 gets no default action for SIGTERM in a container: without the handler a delete would wait.
_WAIT = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\nwhile True:\n    signal.pause()"
_UNSAFE = re.compile(r"[^a-z0-9-]")
_QUANTITY = re.compile(r"([0-9.]+)([KMGTE]i?|k)?")
_UNITS = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "E": 10**18,
          "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Ei": 1 << 60}


@dataclass(frozen=True)
class PodSettings:
    namespace: str
    image: str
    python: str
    max_memory_bytes: int
    cell_timeout_s: float
    cpu_s: int
    max_file_bytes: int
    max_output_bytes: int
    max_data_bytes: int
    cpu_limit: str
    cpu_request: str
    pod_start_timeout_s: float
    request_timeout_s: float
    active_deadline_s: int | None = None
    runtime_class_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def pod_name(sandbox_id: str) -> str:
    """A DNS label made of the id (lowercase, `_` as `-`) and a hash of it, as ids that differ only
    there would otherwise share a pod."""
    check_sandbox_id(sandbox_id)
    digest = hashlib.sha256(sandbox_id.encode()).hexdigest()[:10]
    return re.sub("-+", "-", f"stack-sandbox-{_UNSAFE.sub('-', sandbox_id.lower())[:36]}-{digest}")


def _container(s: PodSettings, memory_bytes: int) -> dict[str, Any]:
    return {
        "name": CONTAINER, "image": s.image, "command": [s.python, "-B", "-c", _WAIT], "workingDir": "/mnt/data",
        "env": [{"name": name, "value": value} for name, value in (
            ("HOME", "/mnt/data"), ("LANG", "C.UTF-8"), ("MPLBACKEND", "Agg"), ("PYTHONDONTWRITEBYTECODE", "1"),
            ("MPLCONFIGDIR", "/tmp/matplotlib"), ("XDG_CACHE_HOME", "/tmp/cache"))],
        "securityContext": {"runAsNonRoot": True, "runAsUser": SANDBOX_UID, "runAsGroup": SANDBOX_UID, "privileged": False,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "resources": {"limits": {"memory": str(memory_bytes), "cpu": s.cpu_limit},
                      "requests": {"memory": str(memory_bytes), "cpu": s.cpu_request}},
        "volumeMounts": [{"name": "data", "mountPath": "/mnt/data"}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def pod_manifest(s: PodSettings, sandbox_id: str, memory_bytes: int) -> dict[str, Any]:
    """No service account token, no service links, an unprivileged user with no capabilities, a
    read-only root, and the cgroup memory limit the sandbox asked for."""
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False, "enableServiceLinks": False, "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,
        "securityContext": {"runAsNonRoot": True, "runAsUser": SANDBOX_UID, "runAsGroup": SANDBOX_UID, "fsGroup": SANDBOX_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_container(s, memory_bytes)],
        # /tmp in memory: it counts against the pod's memory limit, as the Docker backend's tmpfs does.
        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": str(s.max_data_bytes)}},
                    {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": str(memory_bytes)}}],
    }
    if s.active_deadline_s is not None:
        spec["activeDeadlineSeconds"] = s.active_deadline_s
    if s.runtime_class_name is not None:
        spec["runtimeClassName"] = s.runtime_class_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(sandbox_id), "labels": {**s.labels, **LABELS}, "annotations": {"stack.sandbox/id": sandbox_id}},
            "spec": spec}


def _bytes(quantity: Any) -> int | None:
    match = _QUANTITY.fullmatch(str(quantity))
    return int(float(match.group(1)) * _UNITS[match.group(2)]) if match else None


def not_kept(asked: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What isolates the pod, as the API would store it (a mutating webhook may have changed it): each
    setting it did not keep, said."""
    spec, container = got.get("spec", {}), (got.get("spec", {}).get("containers") or [{}])[0]
    security = container.get("securityContext") or {}
    failed = [f"spec.{key} is {spec.get(key)!r}" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    if spec.get("automountServiceAccountToken") is not False:
        failed.append("the service account token is mounted")
    asked_security = asked["spec"]["containers"][0]["securityContext"]
    failed += [f"securityContext.{key} is {security.get(key)!r}" for key in ("runAsUser", "allowPrivilegeEscalation",
               "readOnlyRootFilesystem", "privileged") if security.get(key) != asked_security[key]]
    capabilities = security.get("capabilities") or {}
    if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
        failed.append(f"the capabilities are {capabilities!r}")
    memory = (container.get("resources") or {}).get("limits", {}).get("memory")
    if _bytes(memory) != int(asked["spec"]["containers"][0]["resources"]["limits"]["memory"]):
        failed.append(f"the memory limit is {memory!r}")
    return failed
