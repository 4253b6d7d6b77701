from pathlib import Path
from typing import Any

import pytest

from builder.load import parse_config
from builder.resolve import StackPlan, resolve
from contract.spec import Api
from runtime.stack import ProviderStartError, open_stack
from support.specimens import Recorded


def plan(tmp_path: Path, providers: dict[str, list[dict[str, Any]]]) -> StackPlan:
    return resolve(parse_config({"providers": providers, "state_dir": str(tmp_path / "state")}, {}), {})


def entry(provider_type: str, provider_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"provider_id": provider_id or provider_type, "provider_type": provider_type, **extra}


async def test_providers_start_in_dependency_order_and_stop_in_reverse(tmp_path: Path, specimen_providers: list[str]) -> None:
    resolved = plan(tmp_path, {"tool_runtime": [entry("specimen")], "inference": [entry("local")], "safety": [entry("judge")]})
    async with open_stack(resolved) as stack:
        assert specimen_providers == ["start inference/local", "start tool_runtime/specimen", "start safety/judge"]
    assert specimen_providers[3:] == ["stop safety/judge", "stop tool_runtime/specimen", "stop inference/local"]


async def test_each_provider_receives_its_config_and_its_dependencies(tmp_path: Path, specimen_providers: list[str]) -> None:
    resolved = plan(tmp_path, {"tool_runtime": [entry("specimen")], "inference": [entry("local")]})
    async with open_stack(resolved) as stack:
        [tools] = [running.impl for running in stack.providers if running.planned.api is Api.tool_runtime]
        assert isinstance(tools, Recorded)
        assert tools.deps == {Api.inference: stack.impls[Api.inference]}
        assert Api.vector_stores not in tools.deps  # optional and not configured


async def test_two_tool_runtimes_serving_one_type_stop_the_start(tmp_path: Path, specimen_providers: list[str]) -> None:
    resolved = plan(tmp_path, {"tool_runtime": [entry("fixed", "one"), entry("fixed", "two")]})
    with pytest.raises(ProviderStartError, match=r"^providers\.tool_runtime: tool type 'specimen' is served by two tool_runtime providers, 'one' and 'two'"):
        async with open_stack(resolved):
            pytest.fail("the stack must not start")
    assert specimen_providers == ["start tool_runtime/one", "start tool_runtime/two", "stop tool_runtime/two", "stop tool_runtime/one"]


async def test_a_failed_start_shuts_down_what_already_started(tmp_path: Path, specimen_providers: list[str]) -> None:
    resolved = plan(tmp_path, {"files": [entry("failing")], "inference": [entry("local")]})
    with pytest.raises(ProviderStartError) as error:
        async with open_stack(resolved):
            pytest.fail("the stack must not start")
    assert str(error.value) == (
        "providers.files[0]: provider 'failing' (failing) failed to start: "
        "ConnectionError: upstream refused the connection"
    )
    assert isinstance(error.value.__cause__, ConnectionError)
    assert specimen_providers == ["start inference/local", "fail files/failing", "stop inference/local"]


async def test_the_state_dir_is_created(tmp_path: Path, specimen_providers: list[str]) -> None:
    async with open_stack(plan(tmp_path, {})) as stack:
        assert stack.plan.state_dir.is_dir()


async def test_a_provider_that_does_not_implement_its_api_fails_the_start(tmp_path: Path, specimen_providers: list[str]) -> None:
    with pytest.raises(ProviderStartError) as error:
        async with open_stack(plan(tmp_path, {"inference": [entry("incomplete")]})):
            pytest.fail("the stack must not start")
    assert str(error.value) == (
        "providers.inference[0]: provider 'incomplete' (incomplete) does not implement the inference API: "
        "Recorded lacks chat_completion, embeddings, list_models, stream_chat_completion"
    )


async def test_what_the_app_registers_on_the_stack_closes_before_the_providers_stop(tmp_path: Path,
                                                                                    specimen_providers: list[str]) -> None:
    resolved = plan(tmp_path, {"inference": [entry("local")]})

    async def failing() -> None:
        raise RuntimeError("the quota store is gone")

    async with open_stack(resolved) as stack:
        for name in ("first", "second"):
            async def close(name: str = name) -> None:
                specimen_providers.append(f"close {name}")
            stack.closing.append(close)
        stack.closing.append(failing)  # logged; the rest still close
    assert specimen_providers == ["start inference/local", "close second", "close first", "stop inference/local"]
