"""Which container a tool's calls run in: the one it names, for `auto` the chain's last one while it
runs, else a new one; one gone meanwhile is replaced, and the model is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.containers.protocol import NewContainer
from providers.containers.config import BuiltinContainersConfig
from providers.containers.provider import BuiltinContainers
from providers.containers.store import ContainerStore
from providers.tool_runtime.code_interpreter.choice import GONE, ContainerChoice, Wanted, wanted
from runtime.storage import Database
from support.fake_sandbox import FakeSandboxes


@pytest.fixture
async def containers(database: Database, tmp_path: Path) -> BuiltinContainers:
    store = ContainerStore(database)
    await store.create_tables()
    return BuiltinContainers(store, FakeSandboxes(tmp_path / "sandboxes"), None, BuiltinContainersConfig())


async def test_auto_reuses_the_chains_last_running_container(containers: BuiltinContainers) -> None:
    earlier = [(await containers.create_container(NewContainer(name=name)))["id"] for name in ("first", "second")]
    notes: list[str] = []
    assert await ContainerChoice(containers, "new", earlier).container(0, Wanted(), notes) == earlier[-1]
    assert notes == []


async def test_an_expired_or_deleted_container_is_replaced_and_the_model_told(containers: BuiltinContainers) -> None:
    old = (await containers.create_container(NewContainer(name="old")))["id"]
    await containers.store.expire(old)
    notes: list[str] = []
    chosen = await ContainerChoice(containers, "replacement", [old]).container(0, Wanted(), notes)
    assert chosen != old and (await containers.get_container(chosen))["name"] == "replacement"
    assert notes == [GONE]
    gone = (await containers.create_container(NewContainer(name="gone")))["id"]
    await containers.delete_container(gone)
    notes = []
    assert await ContainerChoice(containers, "named", []).container(0, Wanted(container_id=gone), notes) not in (gone, "")
    assert notes == [GONE]


async def test_the_first_call_chooses_and_a_gone_choice_is_made_again_once(containers: BuiltinContainers) -> None:
    choice = ContainerChoice(containers, "c", [])
    first = await choice.container(0, Wanted(), [])
    assert await choice.container(0, Wanted(), []) == first  # the same turn's other calls
    notes: list[str] = []
    again = await choice.container(0, Wanted(), notes, gone=first)
    assert again != first and notes == [GONE] and await choice.container(0, Wanted(), []) == again


def test_settings_read_as_what_they_want() -> None:
    assert wanted("auto") == Wanted() and wanted("cntr_1") == Wanted(container_id="cntr_1")
    assert wanted({"type": "container_reference", "container_id": "cntr_2"}) == Wanted(container_id="cntr_2")
    assert wanted({"type": "auto", "file_ids": ["file-1"], "memory_limit": "4g",
                   "network_policy": {"type": "allowlist", "allowed_domains": ["example.org"]}}) == Wanted(
        file_ids=("file-1",), memory_limit="4g", allowed_domains=("example.org",))


async def test_a_run_in_a_container_gone_since_it_was_chosen_goes_once_more_in_a_new_one(containers: BuiltinContainers) -> None:
    choice = ContainerChoice(containers, "c", [])
    first = await choice.container(0, Wanted(), [])
    await containers.delete_container(first)
    notes: list[str] = []
    ran_in, ran = await choice.run(0, Wanted(), first, "print(1)", notes)
    assert ran_in not in (first, choice.chosen(1)) and ran_in == choice.chosen(0) and ran is not None and ran.output.logs == "1\n"
    assert notes == [GONE]
