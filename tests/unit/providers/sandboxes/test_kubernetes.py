"""The kubernetes sandboxes against a fake API server (`tests/support/fake_kubernetes.py`) on a real
port: the pod the backend asks for, and the sandbox contract over REST calls and exec WebSockets."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.protocol import SandboxBackend
from providers.sandboxes.kubernetes import KubernetesConfig, KubernetesSandboxes, open_backend
from providers.sandboxes.kubernetes.pod import pod_name
from support.fake_kubernetes import DENY_EGRESS, FakeKubernetes

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api() -> AsyncIterator[FakeKubernetes]:
    fake = FakeKubernetes()
    await fake.start()
    yield fake
    await fake.close()


def _config(api: FakeKubernetes, directory: Path, **changes: Any) -> KubernetesConfig:
    token = directory / "token"
    token.write_text(api.token + "\n")
    settings: dict[str, Any] = {"api_url": api.url, "namespace": api.namespace, "token_file": token, "ca_file": None,
                                "cell_timeout_s": 1, "max_output_bytes": 2048, "pod_start_timeout_s": 10, **changes}
    return KubernetesConfig(**settings)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(api: FakeKubernetes, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KubernetesSandboxes]:
    async with open_backend(_config(api, tmp_path_factory.mktemp("kubernetes"), active_deadline_s=86400)) as opened:
        yield opened


async def test_a_sandbox_is_a_pod_asked_for_unprivileged_read_only_and_without_a_token(
        backend: KubernetesSandboxes, api: FakeKubernetes) -> None:
    assert isinstance(backend, SandboxBackend)
    await backend.create("cntr_Asked", 1 << 30)
    name = pod_name("cntr_Asked")
    assert name.startswith("stack-sandbox-cntr-asked-") and name != pod_name("cntr-asked")
    spec = api.pods[name].manifest["spec"]
    (container,) = spec["containers"]
    assert (spec["automountServiceAccountToken"], spec["enableServiceLinks"], spec["activeDeadlineSeconds"]) == (False, False, 86400)
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 65534
    assert container["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "privileged": False,
                                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["resources"]["limits"]["memory"] in (str(1 << 30), "1Gi")
    assert {mount["mountPath"] for mount in container["volumeMounts"]} == {"/mnt/data", "/tmp"}
    assert {volume["name"]: "emptyDir" in volume for volume in spec["volumes"]} == {"data": True, "tmp": True}
    assert api.pods[name].manifest["metadata"]["labels"]["app.kubernetes.io/name"] == "stack-sandbox"
    assert api.pods[name].looks >= 2  # create waited for it to run
    assert ("POST", "/api/v1/namespaces/sandboxes/pods", {"dryRun": "All"}) in api.requests  # the start-up check, a dry run


async def test_cells_share_names_and_show_the_last_expression_and_the_traceback(backend: KubernetesSandboxes,
                                                                               api: FakeKubernetes) -> None:
    await backend.create("cells", 1 << 30)
    first = await backend.run("cells", "x = 20\nprint('hello')")
    second = await backend.run("cells", "x * 2 + 2")
    failed = await backend.run("cells", "def f():\n    return 1 / 0\nf()")
    assert (first.logs, first.fresh_kernel, second.logs, second.fresh_kernel) == ("hello\n", True, "42\n", False)
    assert failed.status == "failed" and "ZeroDivisionError" in failed.logs and "line 2, in f" in failed.logs
    assert (await backend.run("cells", "print('y' * 5000)")).truncated
    kernels = [command for command in api.execs if "def main()" in " ".join(command)]
    assert len(kernels) == 1 and kernels[0][:3] == ["python3", "-B", "-c"]  # one exec, the driver given by value


async def test_a_cell_past_its_time_is_interrupted_and_one_that_ignores_it_gets_its_kernel_killed(
        backend: KubernetesSandboxes, api: FakeKubernetes) -> None:
    await backend.create("slow", 1 << 30)
    await backend.run("slow", "kept = 1")
    interrupted = await backend.run("slow", "import time\ntime.sleep(30)")
    assert interrupted.status == "timeout" and (await backend.run("slow", "kept")).logs == "1\n"
    killed = await backend.run("slow", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)")
    assert killed.status == "timeout"
    assert not [process for process in api.pods[pod_name("slow")].running()]  # killed by an exec, not left asleep
    after = await backend.run("slow", "print('again'); 'kept' in globals()")
    assert (after.logs, after.fresh_kernel) == ("again\nFalse\n", True)


async def test_files_go_in_and_out_through_execs(backend: KubernetesSandboxes) -> None:
    await backend.create("files", 1 << 30)
    written = await backend.write_file("files", "in/data.csv", b"a,b\n1,2\n")
    assert (written.path, written.bytes) == ("in/data.csv", 8) and written.modified_ns > 0
    await backend.run("files", "import pathlib\npathlib.Path('out.txt').write_text(open('in/data.csv').read().upper())")
    assert {file.path: file.bytes for file in await backend.list_files("files")} == {"in/data.csv": 8, "out.txt": 8}
    assert b"".join([chunk async for chunk in backend.read_file("files", "out.txt")]) == b"A,B\n1,2\n"
    binary = bytes(range(256)) * 2048  # half a MiB, in several stdin messages
    await backend.write_file("files", "blob.bin", binary)
    assert b"".join([chunk async for chunk in backend.read_file("files", "blob.bin")]) == binary
    await backend.delete_file("files", "in/data.csv")
    await backend.stop("files")
    await backend.delete_file("files", "out.txt")  # no kernel: the pod runs all the same
    assert [file.path for file in await backend.list_files("files")] == ["blob.bin"]
    with pytest.raises(NotFoundError):
        await backend.delete_file("files", "out.txt")
    with pytest.raises(NotFoundError):
        [chunk async for chunk in backend.read_file("files", "missing.txt")]
    with pytest.raises(InvalidRequestError):
        await backend.write_file("files", "../etc/passwd", b"x")
    with pytest.raises(InvalidRequestError):
        [chunk async for chunk in backend.read_file("files", "in")]  # a directory


async def test_held_lists_the_sandbox_pods_by_their_labels(backend: KubernetesSandboxes, api: FakeKubernetes) -> None:
    await backend.create("listed_one", 1 << 30)
    held = {entry.sandbox_id: entry.created_at for entry in await backend.held()}
    assert "listed_one" in held and abs(held["listed_one"] - time.time()) < 5  # the id from its annotation, not the pod's name
    await backend.destroy("listed_one")
    assert "listed_one" not in {entry.sandbox_id for entry in await backend.held()}


async def test_destroy_deletes_the_pod_and_a_gone_sandbox_is_not_found(backend: KubernetesSandboxes, api: FakeKubernetes) -> None:
    await backend.create("doomed", 1 << 30)
    await backend.run("doomed", "1")
    await backend.destroy("doomed")
    assert pod_name("doomed") not in api.pods
    await backend.destroy("doomed")
    with pytest.raises(NotFoundError):
        await backend.run("doomed", "1")
    with pytest.raises(NotFoundError):
        await backend.list_files("doomed")
    with pytest.raises(InvalidRequestError):
        await backend.create("too-big", (4 << 30) + 1)


async def test_a_pod_whose_image_cannot_be_pulled_fails_create_and_is_deleted(api: FakeKubernetes, tmp_path: Path) -> None:
    api.image = "python:3.12-slim"
    async with open_backend(_config(api, tmp_path, image="not-pushed:1")) as other:
        with pytest.raises(RuntimeError, match="ErrImagePull"):
            await other.create("unpulled", 1 << 30)
    assert pod_name("unpulled") not in api.pods


async def test_the_provider_does_not_start_when_the_api_refuses_or_drops_what_isolates(api: FakeKubernetes, tmp_path: Path) -> None:
    config = _config(api, tmp_path)
    config.token_file.write_text("stolen")  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="401.*may the service account create pods"):
        async with open_backend(config):
            pass
    with pytest.raises(RuntimeError, match="namespaces \"elsewhere\" not found"):
        async with open_backend(_config(api, tmp_path, namespace="elsewhere")):
            pass

    def privileged(manifest: dict[str, Any]) -> None:
        manifest["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True

    api.admission = privileged
    try:
        with pytest.raises(RuntimeError, match="allowPrivilegeEscalation is True"):
            async with open_backend(_config(api, tmp_path)):
                pass
    finally:
        api.admission = None
    with pytest.raises(RuntimeError, match="reachable"):
        async with open_backend(_config(api, tmp_path, api_url="http://127.0.0.1:9")):
            pass


async def test_the_provider_does_not_start_unless_a_network_policy_denies_the_pods_egress(api: FakeKubernetes, tmp_path: Path) -> None:
    allow_dns = {"metadata": {"name": "dns"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                                                       "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}}
    other_pods = {"metadata": {"name": "web"}, "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}}
    try:
        for policies, said in (([], "no NetworkPolicy in 'sandboxes' denies"), ([other_pods], "no NetworkPolicy"),
                               ([DENY_EGRESS, allow_dns], "NetworkPolicies dns in 'sandboxes' may allow")):
            api.network_policies = policies
            with pytest.raises(RuntimeError, match=said):
                async with open_backend(_config(api, tmp_path)):
                    pass
        async with open_backend(_config(api, tmp_path, check_network_policy=False)):
            pass  # the operator closes the network otherwise
    finally:
        api.network_policies = [DENY_EGRESS]
