"""An API whose providers are all inactive still has its routes: a 503 that says what to set."""

from __future__ import annotations

import os
from pathlib import Path

import openai
import pytest

from builder.load import parse_config
from builder.resolve import resolve
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
