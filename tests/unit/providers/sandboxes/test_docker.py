"""The docker sandboxes against a fake Engine (`tests/support/fake_docker.py`) on a real unix socket:
what the backend asks of the Engine, and the sandbox contract over the Engine's protocol."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from contract.errors import InvalidRequestError, NotFoundError
from providers.sandboxes.docker import DockerConfig, DockerSandboxes, open_backend
from support.fake_docker import FakeEngine

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FakeEngine]:
    fake = FakeEngine(tmp_path_factory.mktemp("docker") / "docker.sock")
    await fake.start()
    yield fake
    await fake.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(engine: FakeEngine) -> AsyncIterator[DockerSandboxes]:
    async with open_backend(DockerConfig(url=engine.url, cell_timeout_s=1, max_output_bytes=2048)) as opened:
        yield opened


async def test_a_container_is_asked_for_with_no_network_no_capabilities_an_unprivileged_user_and_limits(
        backend: DockerSandboxes, engine: FakeEngine) -> None:
    await backend.create("asked", 1 << 30)
    config = engine.containers["stack-sandbox-asked"].config
    host = config["HostConfig"]
    assert (config["User"], config["NetworkDisabled"], host["NetworkMode"]) == ("65534:65534", True, "none")
    assert (host["CapDrop"], host["SecurityOpt"], host["Memory"], host["MemorySwap"], host["PidsLimit"]) == (
        ["ALL"], ["no-new-privileges"], 1 << 30, 1 << 30, 64)
    assert config["Cmd"][:3] == ["python3", "-B", "-c"] and "def main()" in config["Cmd"][3]  # the driver, by value
    assert not engine.containers["stack-sandbox-asked"].running  # the first cell starts it
    assert (engine.containers["stack-sandbox-asked"].root / "mnt" / "data").is_dir()


async def test_no_host_is_ever_allowed_and_an_allowlist_is_refused_before_the_engine_is_asked(
        backend: DockerSandboxes, engine: FakeEngine) -> None:
    assert backend.allowed_hosts == ()
    with pytest.raises(InvalidRequestError) as refused:
        await backend.create("online", 1 << 30, ["pypi.org"])
    assert refused.value.param == "network_policy.allowed_domains" and "allows no hosts" in refused.value.message
    assert "stack-sandbox-online" not in engine.containers


async def test_cells_share_names_and_show_the_last_expression(backend: DockerSandboxes) -> None:
    await backend.create("cells", 1 << 30)
    first = await backend.run("cells", "x = 20\nprint('hello')")
    second = await backend.run("cells", "x * 2 + 2")
    failed = await backend.run("cells", "1 / 0")
    assert (first.logs, first.fresh_kernel, second.logs, second.fresh_kernel) == ("hello\n", True, "42\n", False)
    assert failed.status == "failed" and "ZeroDivisionError" in failed.logs
    assert (await backend.run("cells", "print('y' * 5000)")).truncated


async def test_a_cell_past_its_time_is_interrupted_and_one_that_ignores_it_is_killed(backend: DockerSandboxes, engine: FakeEngine) -> None:
    await backend.create("slow", 1 << 30)
    await backend.run("slow", "kept = 1")
    interrupted = await backend.run("slow", "import time\ntime.sleep(30)")
    assert interrupted.status == "timeout" and (await backend.run("slow", "kept")).logs == "1\n"
    killed = await backend.run("slow", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)")
    assert killed.status == "timeout" and not engine.containers["stack-sandbox-slow"].running
    after = await backend.run("slow", "print('again')")
    assert (after.logs, after.fresh_kernel) == ("again\n", True)


async def test_files_go_in_and_out_as_archives_and_are_deleted_by_an_exec(backend: DockerSandboxes) -> None:
    await backend.create("files", 1 << 30)
    written = await backend.write_file("files", "in/data.csv", b"a,b\n1,2\n")
    assert (written.path, written.bytes) == ("in/data.csv", 8)
    # Relative paths: the fake's "container" runs on this host, in its directory for /mnt/data (the working directory).
    await backend.run("files", "import pathlib\npathlib.Path('out.txt').write_text(open('in/data.csv').read().upper())")
    assert {file.path: file.bytes for file in await backend.list_files("files")} == {"in/data.csv": 8, "out.txt": 8}
    assert b"".join([chunk async for chunk in backend.read_file("files", "out.txt")]) == b"A,B\n1,2\n"
    await backend.delete_file("files", "in/data.csv")  # the container runs (its kernel): exec'd in it
    await backend.stop("files")
    await backend.delete_file("files", "out.txt")  # stopped: started for the exec, and stopped again
    assert await backend.list_files("files") == []
    with pytest.raises(NotFoundError):
        await backend.delete_file("files", "out.txt")
    with pytest.raises(NotFoundError):
        [chunk async for chunk in backend.read_file("files", "missing.txt")]
    with pytest.raises(InvalidRequestError):
        await backend.write_file("files", "../etc/passwd", b"x")
    with pytest.raises(InvalidRequestError):
        [chunk async for chunk in backend.read_file("files", "in")]  # a directory


async def test_held_lists_the_sandbox_containers_by_their_label(backend: DockerSandboxes, engine: FakeEngine) -> None:
    await backend.create("listed", 1 << 30)
    held = {entry.sandbox_id: entry.created_at for entry in await backend.held()}
    assert "listed" in held and abs(held["listed"] - time.time()) < 5
    await backend.destroy("listed")
    assert "listed" not in {entry.sandbox_id for entry in await backend.held()}


async def test_destroy_removes_the_container_and_a_gone_sandbox_is_not_found(backend: DockerSandboxes, engine: FakeEngine) -> None:
    await backend.create("doomed", 1 << 30)
    await backend.run("doomed", "1")
    await backend.destroy("doomed")
    assert "stack-sandbox-doomed" not in engine.containers
    await backend.destroy("doomed")
    with pytest.raises(NotFoundError):
        await backend.run("doomed", "1")
    with pytest.raises(NotFoundError):
        await backend.list_files("doomed")


async def test_an_engine_that_drops_a_limit_stops_the_provider_from_starting(engine: FakeEngine, tmp_path: Path) -> None:
    engine.warnings = ["Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded."]
    try:
        with pytest.raises(RuntimeError, match="PIDs limit discarded"):
            async with open_backend(DockerConfig(url=engine.url)):
                pass
    finally:
        engine.warnings = []
    with pytest.raises(RuntimeError, match="docker pull"):
        async with open_backend(DockerConfig(url=engine.url, image="not-pulled:1")):
            pass
    with pytest.raises(RuntimeError, match="is the Engine"):
        async with open_backend(DockerConfig(url=f"unix://{tmp_path}/none.sock")):
            pass
