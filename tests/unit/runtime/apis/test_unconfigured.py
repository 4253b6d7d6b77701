"""The routes of an API a stack does not serve: found from `ROUTE_PATHS` without importing the API,
and answered with what to add to run.yaml (issue 44)."""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

import pytest

from builder.load import parse_config
from builder.plugins import provider_names
from builder.resolve import StackPlan, resolve
from contract.spec import Api
from runtime.apis import ROUTE_PATHS, SURFACES
from runtime.apis.unconfigured import NotServed, not_served, not_served_message

CONVERSATIONS = {"conversations": [{"provider_id": "builtin", "provider_type": "builtin"}]}


def plan(document: dict[str, Any], tmp_path: Any) -> StackPlan:
    env = {"STACK_STATE_DIR": str(tmp_path)}
    return resolve(parse_config({"version": 1, "name": "t", **document}, env), env)


def test_route_paths_are_the_paths_each_api_declares() -> None:
    declared = {}
    for api, surface in SURFACES.items():
        if surface.router is not None:
            routes = surface.router(MagicMock(), **{used.value: None for used in surface.uses})
            declared[api] = sorted({route.path for route in routes.routes})
    assert {api: sorted(paths) for api, paths in ROUTE_PATHS.items()} == declared


@pytest.mark.parametrize(("path", "api"), [
    ("/v1/moderations", Api.safety),
    ("/v1/prompts", Api.prompts),
    ("/v1/prompts/pmpt_1/versions", Api.prompts),
    ("/v1/prompts/pmpt_1/set-default-version", Api.prompts),
    ("/v1/models/org/model-1", Api.inference),
    ("/v1/models", Api.inference),
    ("/v1/vector_stores/vs_1/file_batches/b_1/files", Api.vector_stores),
    ("/v1/prompts/pmpt_1/nothing", None),
    ("/v1/prompts//versions", None),
    ("/v1/moderations/x", None),
    ("/v1/moderation", None),
    ("/v1/conversations", None),  # served
    ("/moderations", None),
    ("/v1/", None),
])
def test_a_path_is_the_route_of_an_api_not_served_as_the_router_would_match_it(tmp_path: Any, path: str, api: Api | None) -> None:
    stack = plan({"providers": CONVERSATIONS}, tmp_path)
    assert set(not_served(stack)) == set(ROUTE_PATHS) - {Api.conversations}
    assert NotServed(MagicMock(), stack, not_served(stack)).api_of(path) is api


def test_the_message_names_the_api_and_the_provider_types_to_add(tmp_path: Any) -> None:
    installed = ", ".join(provider_names(Api.safety))
    assert installed
    assert not_served_message(plan({"providers": CONVERSATIONS}, tmp_path), Api.safety, "POST", "/v1/moderations") == (
        "POST /v1/moderations is a route of the safety API, which this server does not serve: its run.yaml configures no provider "
        f"for it. To serve it, add one under `providers.safety` (provider types installed: {installed}), then restart the server.")
    limited = plan({"apis": ["conversations"], "providers": CONVERSATIONS}, tmp_path)
    assert "(provider types installed: " + installed + ") and 'safety' to `apis:`, then restart" in not_served_message(
        limited, Api.safety, "POST", "/v1/moderations")


def test_an_api_with_providers_that_apis_leaves_out_is_to_be_listed(tmp_path: Any) -> None:
    stack = plan({"apis": ["conversations"], "providers": {**CONVERSATIONS, "prompts": [{"provider_id": "builtin", "provider_type": "builtin"}]}},
                 tmp_path)
    assert Api.prompts in not_served(stack)
    assert not_served_message(stack, Api.prompts, "GET", "/v1/prompts") == (
        "GET /v1/prompts is a route of the prompts API, which this server does not serve: run.yaml's `apis:` leaves it out. To serve "
        "it, add 'prompts' to `apis:`, then restart the server.")


def test_an_api_whose_providers_are_inactive_keeps_its_503_not_this(tmp_path: Any) -> None:
    stack = plan({"providers": {**CONVERSATIONS, "safety": [
        {"provider_id": "mod", "provider_type": "openai", "enabled_if_env": ["STACK_TEST_NO_SUCH_KEY"], "config": {"api_key": "k"}}]}}, tmp_path)
    assert Api.safety in stack.unavailable_apis() and Api.safety not in not_served(stack)
