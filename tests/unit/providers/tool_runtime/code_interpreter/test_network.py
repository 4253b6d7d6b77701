"""A code_interpreter tool's `container: {"type": "auto", "network_policy": ...}`: an allowlist within
the sandboxes' operator's hosts is taken, echoed and told to the model; one beyond them is a 400."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.errors import InvalidRequestError
from contract.tool_runtime.protocol import ToolContext
from providers.containers.config import BuiltinContainersConfig
from providers.containers.provider import BuiltinContainers
from providers.containers.store import ContainerStore
from providers.tool_runtime.code_interpreter import CodeInterpreterRuntime
from runtime.storage import Database
from support.fake_sandbox import FakeSandboxes

ALLOWLIST = {"type": "allowlist", "allowed_domains": ["pypi.org"]}


@pytest.fixture
async def runtime(database: Database, tmp_path: Path) -> CodeInterpreterRuntime:
    store = ContainerStore(database)
    await store.create_tables()
    sandboxes = FakeSandboxes(tmp_path, allowed_hosts=["pypi.org", "*.pythonhosted.org"])
    return CodeInterpreterRuntime(BuiltinContainers(store, sandboxes, None, BuiltinContainersConfig()), None)


def tool(policy: Any) -> dict[str, Any]:
    return {"type": "code_interpreter", "container": {"type": "auto", "network_policy": policy}}


async def test_an_allowlist_the_operator_covers_is_taken_and_echoed(runtime: CodeInterpreterRuntime) -> None:
    await runtime.check_tool(tool(ALLOWLIST), "tools[0]")
    await runtime.check_tool(tool({"type": "disabled"}), "tools[0]")
    assert runtime.public_tool(tool(ALLOWLIST)).tool["container"] == {"type": "auto", "file_ids": [], "network_policy": ALLOWLIST}


@pytest.mark.parametrize(("policy", "param", "words"), [
    ({"type": "allowlist", "allowed_domains": ["example.com"]}, "tools[0].container.network_policy.allowed_domains", "not among"),
    ({"type": "allowlist", "allowed_domains": []}, "tools[0].container.network_policy.allowed_domains", "non-empty"),
    ({"type": "allowlist", "allowed_domains": ["pypi.org"], "domain_secrets": [{"domain": "pypi.org", "name": "T", "value": "v"}]},
     "tools[0].container.network_policy.domain_secrets", "secrets"),
    ({"type": "open"}, "tools[0].container.network_policy", "disabled"),
])
async def test_a_policy_the_server_cannot_keep_is_a_400_naming_it(runtime: CodeInterpreterRuntime, policy: Any, param: str,
                                                                  words: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        await runtime.check_tool(tool(policy), "tools[0]")
    assert refused.value.param == param and words in refused.value.message


async def test_the_model_is_told_which_hosts_it_can_reach_and_otherwise_that_there_is_no_internet(runtime: CodeInterpreterRuntime) -> None:
    context = ToolContext(response_id="resp_1", history=(), input=())
    session = await runtime.open_session([tool(ALLOWLIST), tool(None)], context)
    networked, closed = (function.description for function in session.functions())
    assert "the internet is reachable only at pypi.org (through a proxy" in networked and "no internet" not in networked
    assert "there is no internet access" in closed
