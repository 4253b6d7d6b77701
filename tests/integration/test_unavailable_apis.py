"""An API whose providers are all inactive still has its routes: a 503 that says what to set. One that
run.yaml does not configure answers its routes with a 404 that says what to add."""

from __future__ import annotations

import os
from pathlib import Path

import openai
import pytest

from builder.load import parse_config
from builder.plugins import provider_names
from builder.resolve import resolve
from contract.spec import Api
from runtime.library_client import LibraryClient


def test_apis_without_an_active_provider_answer_503s_saying_what_to_set(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "STACK_TEST_NO_SUCH_KEY"}
    env["STACK_STATE_DIR"] = str(tmp_path)
    document = {"version": 1, "name": "idle", "providers": {
        "inference": [{"provider_id": "remote", "provider_type": "openai", "enabled_if_env": ["STACK_TEST_NO_SUCH_KEY"],
                       "config": {"api_key": "${env.STACK_TEST_NO_SUCH_KEY}"}}],
        "responses": [{"provider_id": "builtin", "provider_type": "builtin"}],
        "conversations": [{"provider_id": "builtin", "provider_type": "builtin"}],
    }}
    with LibraryClient(resolve(parse_config(document, env), env)) as stack:
        client = stack.openai(max_retries=0)
        assert client.models.list().data == []  # what there is: nothing
        with pytest.raises(openai.InternalServerError) as chat:
            client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
        assert chat.value.status_code == 503 and chat.value.code == "no_active_provider"
        assert "set STACK_TEST_NO_SUCH_KEY (provider 'remote')" in chat.value.message
        with pytest.raises(openai.InternalServerError) as response:
            client.responses.create(model="any", input="hi")
        assert response.value.status_code == 503 and "enable a provider of inference" in response.value.message
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.list()
        for stream in (False, True):
            with pytest.raises(openai.InternalServerError) as legacy:
                client.completions.create(model="any", prompt="hi", stream=stream)
            assert legacy.value.status_code == 503 and legacy.value.code == "no_active_provider"
        assert client.conversations.create().id.startswith("conv_")  # an API with its provider works as ever


def test_the_routes_of_an_api_run_yaml_does_not_configure_say_what_to_add(openai_client: openai.OpenAI) -> None:
    # The suite's run.yaml has no safety and no prompts provider (issue 44: this was "Unknown route").
    with pytest.raises(openai.NotFoundError) as moderation:
        openai_client.moderations.create(input="hello")
    installed = ", ".join(provider_names(Api.safety))
    assert installed and moderation.value.body == {
        "message": "POST /v1/moderations is a route of the safety API, which this server does not serve: its run.yaml configures no "
                   f"provider for it. To serve it, add one under `providers.safety` (provider types installed: {installed}), then "
                   "restart the server.",
        "type": "invalid_request_error", "param": None, "code": "api_not_configured"}
    for method, path in [("get", "/prompts"), ("put", "/prompts/pmpt_x/set-default-version"), ("delete", "/prompts/pmpt_x")]:
        with pytest.raises(openai.NotFoundError) as prompts:
            getattr(openai_client, method)(path, cast_to=object, **({"body": {}} if method == "put" else {}))
        assert prompts.value.code == "api_not_configured" and "`providers.prompts`" in prompts.value.message
    with pytest.raises(openai.NotFoundError) as unknown:  # a path of no API is still an unknown route
        openai_client.get("/moderations/x", cast_to=object)
    assert unknown.value.code is None and unknown.value.message.endswith("Unknown route: GET /v1/moderations/x")
    document = openai_client.get("/inspect/routes", cast_to=object)
    assert not any(route["route"].startswith(("/v1/moderations", "/v1/prompts")) for route in document["data"])  # type: ignore[index]


def test_an_api_left_out_by_apis_says_to_list_it(tmp_path: Path) -> None:
    env = dict(os.environ, STACK_STATE_DIR=str(tmp_path))
    document = {"version": 1, "name": "limited", "apis": ["inference"], "providers": {
        "inference": [{"provider_id": "remote", "provider_type": "openai", "config": {"api_key": "k", "base_url": "http://127.0.0.1:9/v1"}}],
        "conversations": [{"provider_id": "builtin", "provider_type": "builtin"}],
    }}
    with LibraryClient(resolve(parse_config(document, env), env)) as stack:
        with pytest.raises(openai.NotFoundError) as left_out:
            stack.openai(max_retries=0).conversations.create()
        assert left_out.value.code == "api_not_configured"
        assert "run.yaml's `apis:` leaves it out. To serve it, add 'conversations' to `apis:`" in left_out.value.message
