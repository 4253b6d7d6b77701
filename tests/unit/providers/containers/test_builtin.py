"""The built-in containers provider over a sandbox backend: what a container holds, whose it is,
when it expires, and the files code leaves in it."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contract.caller import CALLER, Principal
from contract.containers.protocol import ContainerExpiredError, ContainersProvider, NewContainer
from contract.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from providers.containers.config import BuiltinContainersConfig
from providers.containers.provider import ORPHAN_AGE_S, BuiltinContainers
from providers.containers.store import ContainerStore
from providers.files.local import LocalFiles, LocalFilesConfig, files
from runtime.storage import Database, Sql
from support.fake_sandbox import FakeSandboxes


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += minutes * 60


@dataclass
class Setup:
    containers: BuiltinContainers
    sandboxes: FakeSandboxes
    files: LocalFiles
    clock: Clock

    async def upload(self, data: bytes, filename: str) -> str:
        """A file uploaded to the files API, its id."""
        return str((await self.files.create_file(io.BytesIO(data), filename, "user_data", None))["id"])

    async def content(self, container_id: str, file_id: str) -> bytes:
        content = await self.containers.file_content(container_id, file_id)
        return b"".join([chunk async for chunk in content.chunks])

    async def records(self, table: str) -> list[Any]:
        return await self.containers.store.db.read_all(Sql(f"SELECT id FROM {table}"))


@pytest.fixture
async def setup(database: Database, tmp_path: Path) -> Setup:
    await database.create_tables([files])
    (tmp_path / "files").mkdir()
    local = LocalFiles(database, tmp_path / "files", LocalFilesConfig())
    store = ContainerStore(database)
    await store.create_tables()
    sandboxes = FakeSandboxes(tmp_path / "sandboxes")
    clock = Clock()
    config = BuiltinContainersConfig(max_expiry_minutes=120, max_file_bytes=1000)
    return Setup(BuiltinContainers(store, sandboxes, local, config, clock=clock), sandboxes, local, clock)


@contextlib.contextmanager
def acting_as(principal: str) -> Iterator[None]:
    token = CALLER.set(Principal(principal))
    try:
        yield
    finally:
        CALLER.reset(token)


async def test_it_implements_the_containers_protocol(setup: Setup) -> None:
    assert isinstance(setup.containers, ContainersProvider)


async def test_a_container_starts_with_copies_of_its_files_under_mnt_data(setup: Setup) -> None:
    notes = await setup.upload(b"a,b\n1,2\n", "table.csv")
    made = await setup.containers.create_container(NewContainer(name="analysis", file_ids=[notes]))
    assert made["id"].startswith("cntr_") and made["object"] == "container" and made["status"] == "running"
    assert made["expires_after"] == {"anchor": "last_active_at", "minutes": 20} and made["memory_limit"] == "1g"
    assert made["last_active_at"] == made["created_at"] == int(setup.clock.now)
    listed, has_more = await setup.containers.list_files(made["id"], None, 20, "asc")
    assert not has_more and [(f["path"], f["bytes"], f["source"]) for f in listed] == [("/mnt/data/table.csv", 8, "user")]
    assert listed[0]["id"].startswith("cfile_") and listed[0]["object"] == "container.file" and listed[0]["container_id"] == made["id"]
    assert await setup.content(made["id"], listed[0]["id"]) == b"a,b\n1,2\n"
    assert (setup.sandboxes.data_dir(made["id"]) / "table.csv").read_bytes() == b"a,b\n1,2\n"


async def test_an_unknown_file_id_is_a_404_naming_it_and_nothing_is_created(setup: Setup) -> None:
    known = await setup.upload(b"x", "x.txt")
    with pytest.raises(NotFoundError) as missing:
        await setup.containers.create_container(NewContainer(name="c", file_ids=[known, "file-nope"]))
    assert "file-nope" in missing.value.message and missing.value.param == "file_ids"
    assert setup.sandboxes.calls == [] and await setup.records("containers") == [] and await setup.records("container_files") == []


async def test_a_container_without_a_policy_has_no_network(setup: Setup) -> None:
    made = await setup.containers.create_container(NewContainer(name="closed"))
    assert made["network_policy"] == {"type": "disabled"} and setup.sandboxes.domains == {}


async def test_an_allowlist_the_operator_covers_is_given_to_the_sandbox_and_echoed(setup: Setup) -> None:
    setup.containers.sandboxes = sandboxes = FakeSandboxes(setup.sandboxes.root, allowed_hosts=["pypi.org", "*.pythonhosted.org"])
    made = await setup.containers.create_container(NewContainer(name="online", allowed_domains=("PyPI.org", "files.pythonhosted.org")))
    policy = {"type": "allowlist", "allowed_domains": ["pypi.org", "files.pythonhosted.org"]}
    assert made["network_policy"] == policy and sandboxes.domains == {made["id"]: ("pypi.org", "files.pythonhosted.org")}
    assert (await setup.containers.get_container(made["id"]))["network_policy"] == policy
    assert (await setup.containers.list_containers(None, 20, "asc", None))[0][0]["network_policy"] == policy


@pytest.mark.parametrize(("operator", "domains", "words"), [
    ((), ("pypi.org",), "allows no hosts"),
    (("pypi.org",), ("pypi.org", "evil.com"), "'evil.com' is not among the hosts this server's operator allows (pypi.org)"),
])
async def test_an_allowlist_the_operator_does_not_cover_is_a_400_and_nothing_is_created(setup: Setup, operator: tuple[str, ...],
                                                                                        domains: tuple[str, ...], words: str) -> None:
    setup.containers.sandboxes = sandboxes = FakeSandboxes(setup.sandboxes.root, allowed_hosts=operator)
    with pytest.raises(InvalidRequestError) as refused:
        await setup.containers.create_container(NewContainer(name="c", allowed_domains=domains))
    assert refused.value.param == "network_policy.allowed_domains" and words in refused.value.message
    assert sandboxes.calls == [] and await setup.records("containers") == []


async def test_another_principals_container_is_not_there_on_any_call(setup: Setup) -> None:
    with acting_as("alice"):
        mine = await setup.containers.create_container(NewContainer(name="alice's"))
        upload = await setup.containers.create_file(mine["id"], data=b"secret", filename="s.txt")
        alices_file = await setup.upload(b"alice's bytes", "a.txt")
    with acting_as("bob"):
        calls = [setup.containers.get_container(mine["id"]), setup.containers.delete_container(mine["id"]),
                 setup.containers.list_files(mine["id"], None, 20, "asc"), setup.containers.get_file(mine["id"], upload["id"]),
                 setup.containers.file_content(mine["id"], upload["id"]), setup.containers.delete_file(mine["id"], upload["id"]),
                 setup.containers.create_file(mine["id"], data=b"x", filename="x"), setup.containers.run_code(mine["id"], "1")]
        for call in calls:
            with pytest.raises(NotFoundError):
                await call
        assert (await setup.containers.list_containers(None, 20, "desc", None))[0] == []
        with pytest.raises(NotFoundError):  # nor is her file of the files API
            await setup.containers.create_container(NewContainer(name="bob's", file_ids=[alices_file]))
    with acting_as("alice"):
        assert [c["id"] for c in (await setup.containers.list_containers(None, 20, "desc", None))[0]] == [mine["id"]]
        assert await setup.content(mine["id"], upload["id"]) == b"secret"


async def test_a_cell_registers_the_files_it_writes_and_a_changed_file_keeps_its_id(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c")))["id"]
    first = await setup.containers.run_code(cid, "import os\nos.makedirs('out')\nopen('out/a.txt', 'w').write('one')\n6 * 7")
    assert first.output.logs == "42\n" and first.output.status == "completed"
    assert [(f["path"], f["bytes"], f["source"]) for f in first.files] == [("/mnt/data/out/a.txt", 3, "assistant")]
    second = await setup.containers.run_code(cid, "open('out/a.txt', 'w').write('three')")
    assert [(f["id"], f["bytes"]) for f in second.files] == [(first.files[0]["id"], 5)]
    assert await setup.content(cid, first.files[0]["id"]) == b"three"
    assert (await setup.containers.run_code(cid, "x = 1")).files == []


async def test_a_file_a_cell_removes_is_forgotten_and_a_failing_cell_still_registers_its_files(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c")))["id"]
    uploaded = await setup.containers.create_file(cid, data=b"data", filename="d.bin")
    run = await setup.containers.run_code(cid, "import os\nos.remove('d.bin')\nopen('partial.txt', 'w').write('p')\n1 / 0")
    assert run.output.status == "failed" and "ZeroDivisionError" in run.output.logs
    assert [f["path"] for f in run.files] == ["/mnt/data/partial.txt"]
    assert [f["path"] for f in (await setup.containers.list_files(cid, None, 20, "asc"))[0]] == ["/mnt/data/partial.txt"]
    with pytest.raises(NotFoundError):
        await setup.containers.get_file(cid, uploaded["id"])


async def test_an_upload_keeps_only_its_name_and_one_over_the_limit_is_a_413(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c")))["id"]
    made = await setup.containers.create_file(cid, data=b"x", filename="../../etc/passwd")
    assert made["path"] == "/mnt/data/passwd" and made["source"] == "user"
    with pytest.raises(PayloadTooLargeError):
        await setup.containers.create_file(cid, data=b"x" * 1001, filename="big.bin")
    again = await setup.containers.create_file(cid, data=b"xy", filename="passwd")  # the same path: the same file, new bytes
    assert (again["id"], again["bytes"]) == (made["id"], 2)


async def test_an_idle_container_expires_its_sandbox_and_files_go_and_its_record_stays(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c", expires_after_minutes=5)))["id"]
    kept = await setup.containers.create_file(cid, data=b"x", filename="x.txt")
    setup.clock.advance(4)
    await setup.containers.run_code(cid, "1")  # activity: five more minutes from now
    setup.clock.advance(4)
    await setup.containers.sweep()
    assert (await setup.containers.get_container(cid))["status"] == "running" and setup.sandboxes.exists(cid)
    setup.clock.advance(1)
    assert (await setup.containers.get_container(cid))["status"] == "expired"  # past its time, before any sweep
    await setup.containers.sweep()
    assert not setup.sandboxes.exists(cid) and await setup.records("container_files") == []
    assert (await setup.containers.get_container(cid))["status"] == "expired"
    with pytest.raises(ContainerExpiredError) as expired:
        await setup.containers.run_code(cid, "1")
    assert expired.value.status == 404 and expired.value.code == "container_expired"
    with pytest.raises(NotFoundError):
        await setup.containers.get_file(cid, kept["id"])
    await setup.containers.delete_container(cid)
    with pytest.raises(NotFoundError):
        await setup.containers.get_container(cid)


async def test_the_sweep_destroys_sandboxes_a_crash_left_once_an_hour_old(setup: Setup) -> None:
    kept = (await setup.containers.create_container(NewContainer(name="kept")))["id"]
    expired = (await setup.containers.create_container(NewContainer(name="expired", expires_after_minutes=1)))["id"]
    await setup.containers.store.expire(expired)  # then the crash: its sandbox was never destroyed
    await setup.sandboxes.create("cntr_unrecorded", 1 << 30)  # made, then the crash: no record
    await setup.sandboxes.create("cntr_being_made", 1 << 30)  # a create under way elsewhere
    for sandbox_id in (kept, expired, "cntr_unrecorded"):
        setup.sandboxes.created_at[sandbox_id] = setup.clock() - ORPHAN_AGE_S - 1
    setup.sandboxes.created_at["cntr_being_made"] = setup.clock() - 5
    await setup.containers.sweep()
    assert {held.sandbox_id for held in await setup.sandboxes.held()} == {kept, "cntr_being_made"}
    assert (await setup.containers.get_container(kept))["status"] == "running"


async def test_a_request_to_a_container_past_its_expiry_expires_it_without_waiting_for_the_sweep(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c", expires_after_minutes=1)))["id"]
    setup.clock.advance(1)
    with pytest.raises(ContainerExpiredError):
        await setup.containers.list_files(cid, None, 20, "asc")
    assert not setup.sandboxes.exists(cid)


async def test_deleting_a_container_removes_its_records_and_its_sandbox(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c")))["id"]
    await setup.containers.create_file(cid, data=b"x", filename="x.txt")
    assert await setup.containers.delete_container(cid) == {"id": cid, "object": "container.deleted", "deleted": True}
    assert not setup.sandboxes.exists(cid) and await setup.records("containers") == [] and await setup.records("container_files") == []


async def test_limits_are_refused_naming_them(setup: Setup) -> None:
    with pytest.raises(InvalidRequestError) as memory:
        await setup.containers.create_container(NewContainer(name="c", memory_limit="16g"))  # the fake allows 4 GiB
    assert memory.value.param == "memory_limit" and "4096 MiB" in memory.value.message and "1g, 4g" in memory.value.message
    with pytest.raises(InvalidRequestError) as minutes:
        await setup.containers.create_container(NewContainer(name="c", expires_after_minutes=121))
    assert minutes.value.param == "expires_after.minutes" and "120" in minutes.value.message
    big = await setup.upload(b"x" * 1001, "big.bin")
    with pytest.raises(PayloadTooLargeError):
        await setup.containers.create_container(NewContainer(name="c", file_ids=[big]))
    assert setup.sandboxes.calls == []
    made = await setup.containers.create_container(NewContainer(name="c", memory_limit="4g"))
    assert made["memory_limit"] == "4g" and setup.sandboxes.memory[made["id"]] == 4 << 30


async def test_lists_page_after_an_id_in_either_order_and_filter_by_name(setup: Setup) -> None:
    ids = [(await setup.containers.create_container(NewContainer(name="a" if i % 2 else "b")))["id"] for i in range(5)]
    page, has_more = await setup.containers.list_containers(None, 2, "asc", None)
    assert [c["id"] for c in page] == ids[:2] and has_more
    page, has_more = await setup.containers.list_containers(ids[1], 10, "asc", None)
    assert [c["id"] for c in page] == ids[2:] and not has_more
    assert [c["id"] for c in (await setup.containers.list_containers(None, 10, "desc", "a"))[0]] == [ids[3], ids[1]]
    files = [(await setup.containers.create_file(ids[0], data=b"x", filename=f"{i}.txt"))["id"] for i in range(3)]
    page, has_more = await setup.containers.list_files(ids[0], files[2], 1, "desc")
    assert [f["id"] for f in page] == [files[1]] and has_more


async def test_at_start_files_with_no_record_are_recorded_and_records_of_files_gone_are_dropped(setup: Setup) -> None:
    cid = (await setup.containers.create_container(NewContainer(name="c")))["id"]
    lost = await setup.containers.create_file(cid, data=b"x", filename="lost.txt")
    (setup.sandboxes.data_dir(cid) / "lost.txt").unlink()
    (setup.sandboxes.data_dir(cid) / "unrecorded.txt").write_bytes(b"written, then the crash")  # bytes first, record after
    await setup.containers.reconcile()
    listed = (await setup.containers.list_files(cid, None, 20, "asc"))[0]
    assert [(f["path"], f["bytes"]) for f in listed] == [("/mnt/data/unrecorded.txt", 23)]
    with pytest.raises(NotFoundError):
        await setup.containers.get_file(cid, lost["id"])
