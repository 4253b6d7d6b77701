from pathlib import Path
from typing import Any

import pytest

from builder.errors import ConfigError
from builder.load import parse_config
from builder.plugins import PluginLoadError
from builder.resolve import StackPlan, resolve
from contract.spec import Api
from support import specimens
from support.specimens import UrlConfig


def plan(providers: dict[str, list[dict[str, Any]]], env: dict[str, str] | None = None, **extra: Any) -> StackPlan:
    env = env or {}
    return resolve(parse_config({"providers": providers, **extra}, env), env)


def entry(provider_type: str, provider_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"provider_id": provider_id or provider_type, "provider_type": provider_type, **extra}


REMOTE = entry("remote", config={"base_url": "http://127.0.0.1:8000/v1"})


def test_each_provider_config_is_validated_into_its_own_model(specimen_providers: list[str]) -> None:
    resolved = plan({"inference": [entry("remote", config={"base_url": "http://x/v1", "timeout_s": "2.5"})]})
    [provider] = resolved.providers
    assert isinstance(provider.config, UrlConfig)
    assert provider.config.timeout_s == 2.5
    assert provider.spec is specimens.INFERENCE_REMOTE
    assert provider.path == "providers.inference[0]"


def test_a_bad_provider_config_is_reported_under_its_config_path(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError) as error:
        plan({"inference": [entry("local"), entry("remote", config={"base_url": "x", "timeout": 3})]})
    message = str(error.value)
    assert message.startswith("providers.inference[1].config.timeout: unknown key (expected one of: api_key, base_url, timeout_s)")


def test_a_missing_provider_setting_is_reported(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^providers\.inference\[0\]\.config\.base_url: required setting is missing"):
        plan({"inference": [entry("remote")]})


def test_an_unknown_api_lists_the_known_ones(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^providers\.infrence: unknown API 'infrence' \(expected one of: inference, responses"):
        plan({"infrence": [entry("remote")]})


def test_an_unknown_provider_names_the_path_and_lists_the_installed_ones(specimen_providers: list[str]) -> None:
    with pytest.raises(PluginLoadError) as error:
        plan({"inference": [entry("olama")]})
    assert str(error.value).startswith("providers.inference[0].provider_type: unknown provider 'olama' for API 'inference' (installed: ")
    assert "local" in str(error.value)


def test_a_broken_plugin_stops_resolution_with_the_cause_chained(specimen_providers: list[str]) -> None:
    with pytest.raises(PluginLoadError) as error:
        plan({"inference": [entry("missing-module")]})
    assert "providers.inference[0].provider_type" in str(error.value)
    assert isinstance(error.value.__cause__, ModuleNotFoundError)


def test_providers_start_after_the_apis_they_depend_on(specimen_providers: list[str]) -> None:
    resolved = plan({
        "tool_runtime": [entry("specimen")],
        "vector_stores": [entry("specimen")],
        "inference": [REMOTE, entry("local")],
    })
    assert resolved.apis == (Api.inference, Api.vector_stores, Api.tool_runtime)
    assert [p.provider_id for p in resolved.providers] == ["remote", "local", "specimen", "specimen"]


def test_a_provider_whose_required_api_is_not_configured_is_an_error(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=(
        r"^providers\.tool_runtime\[0\]: provider 'specimen' requires the 'inference' API, which has no provider "
        r"configured \(add one under providers\.inference\)"
    )):
        plan({"tool_runtime": [entry("specimen")]})


def test_optional_apis_order_the_start_only_when_configured(specimen_providers: list[str]) -> None:
    assert plan({"safety": [entry("judge")]}).apis == (Api.safety,)
    assert plan({"safety": [entry("judge")], "inference": [REMOTE]}).apis == (Api.inference, Api.safety)


def test_a_dependency_cycle_is_reported_with_the_cycle(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^dependency cycle between providers: (tool_runtime -> files -> tool_runtime|files -> tool_runtime -> files)$"):
        plan({"tool_runtime": [entry("needs-files")], "files": [entry("needs-tools")]})


def test_several_providers_are_allowed_where_the_api_routes_by_model(specimen_providers: list[str]) -> None:
    assert len(plan({"inference": [REMOTE, entry("local")]}).providers) == 2


def test_two_providers_for_an_api_that_cannot_route_is_an_error(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=(
        r"^providers\.safety: 2 providers are configured \(a, b\), but the safety API does not route "
        r"between providers: keep exactly one"
    )):
        plan({"safety": [entry("judge", "a"), entry("judge", "b")]})


def test_served_apis_default_to_every_configured_api(specimen_providers: list[str]) -> None:
    resolved = plan({"inference": [REMOTE], "tool_runtime": [entry("specimen")]})
    assert set(resolved.served_apis) == {Api.inference, Api.tool_runtime}


def test_apis_may_serve_a_subset_leaving_the_others_as_dependencies(specimen_providers: list[str]) -> None:
    resolved = plan({"inference": [REMOTE], "tool_runtime": [entry("specimen")]}, apis=["tool_runtime"])
    assert resolved.served_apis == (Api.tool_runtime,)
    assert resolved.apis == (Api.inference, Api.tool_runtime)


def test_an_api_listed_without_a_provider_is_an_error(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^apis\[1\]: API 'files' is listed to be served, but no active provider"):
        plan({"inference": [REMOTE]}, apis=["inference", "files"])


def test_an_unknown_api_in_apis_is_an_error(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^apis\[0\]: unknown API 'chat'"):
        plan({}, apis=["chat"])


def test_inactive_providers_are_left_out_and_reported(specimen_providers: list[str]) -> None:
    vllm = entry("remote", "vllm", enabled_if_env=["VLLM_URL"], config={"base_url": "${env.VLLM_URL}"})
    resolved = plan({"inference": [entry("local"), vllm]})
    assert [p.provider_id for p in resolved.providers] == ["local"]
    [inactive] = resolved.inactive
    assert (inactive.provider_id, inactive.missing_env) == ("vllm", ("VLLM_URL",))
    active = plan({"inference": [entry("local"), vllm]}, env={"VLLM_URL": "http://gpu/v1"})
    assert [p.provider_id for p in active.providers] == ["local", "vllm"]


def test_an_inactive_provider_is_not_loaded(specimen_providers: list[str]) -> None:
    resolved = plan({"inference": [entry("missing-module", enabled_if_env=["NEVER_SET"])]})
    assert resolved.providers == ()


def test_storage_stores_must_name_a_declared_backend(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^storage\.stores\.responses: unknown backend 'pg' \(declared under storage\.backends: default, local\)"):
        plan({}, storage={"backends": {"local": {"type": "sqlite", "path": "/tmp/x.db"}}, "stores": {"responses": "pg"}})


def test_registered_models_must_name_an_inference_provider(specimen_providers: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^models\[0\]\.provider_id: 'nope' is not an inference provider \(inference providers: remote\)"):
        plan({"inference": [REMOTE]}, models=[{"model_id": "m", "provider_id": "nope"}])


def test_models_of_inactive_providers_are_dropped(specimen_providers: list[str]) -> None:
    vllm = entry("remote", "vllm", enabled_if_env=["VLLM_URL"], config={"base_url": "${env.VLLM_URL}"})
    resolved = plan({"inference": [vllm, entry("local")]}, models=[
        {"model_id": "big", "provider_id": "vllm"}, {"model_id": "small", "provider_id": "local"},
    ])
    assert [m.model_id for m in resolved.models] == ["small"]


def test_state_dir_defaults_under_the_home_or_stack_state_dir(specimen_providers: list[str]) -> None:
    assert plan({}).state_dir == Path("~/.stack/stack").expanduser()
    assert plan({}, env={"STACK_STATE_DIR": "/srv/state"}).state_dir == Path("/srv/state/stack")
    assert plan({}, state_dir="/data").state_dir == Path("/data")


def test_a_provider_whose_required_api_is_all_inactive_is_inactive_too(specimen_providers: list[str]) -> None:
    vllm = entry("remote", "vllm", enabled_if_env=["VLLM_URL"], config={"base_url": "${env.VLLM_URL}"})
    resolved = plan({"inference": [vllm], "tool_runtime": [entry("specimen")], "safety": [entry("judge")]})
    assert [p.api for p in resolved.providers] == [Api.safety]
    by_api = {p.api: p for p in resolved.inactive}
    assert by_api[Api.tool_runtime].waiting_for == (Api.inference,)
    assert by_api[Api.tool_runtime].hint() == "enable a provider of inference to enable it"
    assert by_api[Api.inference].hint() == "set VLLM_URL to enable it"
    active = plan({"inference": [vllm], "tool_runtime": [entry("specimen")]}, env={"VLLM_URL": "http://gpu/v1"})
    assert [p.api for p in active.providers] == [Api.inference, Api.tool_runtime]
