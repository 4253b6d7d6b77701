"""Prompt templates: the prompts API (OGX's shape, through the openai SDK's raw verbs, which have
no prompts resource) and the `prompt` parameter of Responses, in server and library modes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from support.live_stack import run_yaml, served

TEMPLATE = "You answer questions about {{topic}} for {{audience}}. Be brief."
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
       "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeUpstream

    def call(self, method: str, path: str, body: Any = None) -> Any:
        if method == "get":
            return self.client.get(path, cast_to=object)
        if method == "delete":
            return self.client.delete(path, cast_to=object)
        return getattr(self.client, method)(path, body=body, cast_to=object)


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("prompts")
    with running_fake_upstream() as upstream:
        prompts = "  prompts: [{provider_id: builtin, provider_type: builtin}]"
        with served(request.param, run_yaml(root, upstream.base_url, prompts, name="prompts")) as client:
            yield Stack(client, upstream)


def test_versions_are_saved_listed_and_one_is_the_default(stack: Stack) -> None:
    created = stack.call("post", "/prompts", {"prompt": TEMPLATE, "variables": ["topic", "audience"]})
    prompt_id = created["prompt_id"]
    assert prompt_id.startswith("pmpt_") and len(prompt_id) == 53
    assert (created["version"], created["is_default"], created["variables"]) == (1, True, ["topic", "audience"])
    second = stack.call("put", f"/prompts/{prompt_id}", {"prompt": "Only {{topic}}.", "variables": ["topic"], "version": 1})
    assert (second["version"], second["is_default"]) == (2, True)
    third = stack.call("put", f"/prompts/{prompt_id}", {"prompt": "{{topic}}!", "version": 2, "set_as_default": False})
    assert (third["version"], third["is_default"], third["variables"]) == (3, False, ["topic"])
    assert stack.call("get", f"/prompts/{prompt_id}")["version"] == 2
    assert stack.call("get", f"/prompts/{prompt_id}?version=1")["prompt"] == TEMPLATE
    assert [v["version"] for v in stack.call("get", f"/prompts/{prompt_id}/versions")["data"]] == [1, 2, 3]
    assert stack.call("put", f"/prompts/{prompt_id}/set-default-version", {"version": 3})["is_default"] is True
    listed = {p["prompt_id"]: p["version"] for p in stack.call("get", "/prompts")["data"]}
    assert listed[prompt_id] == 3
    with pytest.raises(openai.BadRequestError) as stale:  # saved on top of an old version
        stack.call("put", f"/prompts/{prompt_id}", {"prompt": "x", "version": 1})
    assert stale.value.body["param"] == "version"  # type: ignore[index]
    assert stack.call("delete", f"/prompts/{prompt_id}")["deleted"] is True
    with pytest.raises(openai.NotFoundError):
        stack.call("get", f"/prompts/{prompt_id}")


@pytest.mark.parametrize(("body", "param"), [({"prompt": "Hi {{name}}", "variables": []}, "variables"), ({}, "prompt"),
                                             ({"prompt": "x", "variables": ["bad name"]}, "variables"), ({"prompt": "x", "tone": 1}, "tone")])
def test_a_malformed_prompt_is_a_400_naming_the_field(stack: Stack, body: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.call("post", "/prompts", body)
    assert refused.value.body["param"] == param  # type: ignore[index]


def test_a_response_expands_the_prompt_into_its_instructions(stack: Stack) -> None:
    prompt_id = stack.call("post", "/prompts", {"prompt": TEMPLATE})["prompt_id"]
    stack.call("put", f"/prompts/{prompt_id}", {"prompt": "Version two about {{topic}}.", "version": 1, "set_as_default": False})
    response = stack.client.responses.create(model="fake-model", input="[tokens:2] what is a tide?", instructions="Answer in English.",
                                             prompt={"id": prompt_id, "variables": {"topic": "the sea",
                                                                                    "audience": {"type": "input_text", "text": "sailors"}}})
    system = stack.upstream.bodies()[-1]["messages"][0]
    assert system == {"role": "system", "content": "You answer questions about the sea for sailors. Be brief.\n\nAnswer in English."}
    assert response.prompt is not None and (response.prompt.id, response.prompt.version) == (prompt_id, "1")
    stack.client.responses.create(model="fake-model", input="[tokens:2] hi", prompt={"id": prompt_id, "version": "2",
                                                                                      "variables": {"topic": "fog"}})
    assert stack.upstream.bodies()[-1]["messages"][0]["content"] == "Version two about fog."


def test_a_prompt_stands_for_a_missing_input(stack: Stack) -> None:
    # As at OpenAI (its docs call a prompt with no input); without the prompt, 'input' is missing (issue 44).
    prompt_id = stack.call("post", "/prompts", {"prompt": "Say hello about {{topic}}. [tokens:2]"})["prompt_id"]
    response = stack.client.responses.create(model="fake-model", prompt={"id": prompt_id, "variables": {"topic": "tides"}})
    assert response.status == "completed"
    assert stack.upstream.bodies()[-1]["messages"] == [{"role": "system", "content": "Say hello about tides. [tokens:2]"}]
    with pytest.raises(openai.BadRequestError) as missing:
        stack.client.responses.create(model="fake-model")
    assert missing.value.body == {"message": "Missing required parameter: 'input'.", "type": "invalid_request_error", "param": "input",
                                  "code": "missing_required_parameter"}


def test_an_image_variable_comes_as_an_attachment_ahead_of_the_input(stack: Stack) -> None:
    prompt_id = stack.call("post", "/prompts", {"prompt": "Describe {{photo}} in one line."})["prompt_id"]
    stack.client.responses.create(model="fake-model", input="[tokens:2] go", prompt={
        "id": prompt_id, "variables": {"photo": {"type": "input_image", "image_url": PNG}}})  # type: ignore[typeddict-item]
    messages = stack.upstream.bodies()[-1]["messages"]
    assert messages[0]["content"] == "Describe (attached as photo) in one line."
    attached = messages[1]["content"]
    assert attached[0] == {"type": "text", "text": "photo:"} and attached[1]["type"] == "image_url"
    assert messages[2] == {"role": "user", "content": "[tokens:2] go"}


@pytest.mark.parametrize(("prompt", "param", "status"), [
    ({"id": "pmpt_" + "0" * 48}, "prompt.id", 404),
    ({"id": "PROMPT", "version": "9"}, "prompt.version", 404),
    ({"id": "PROMPT", "variables": {"topic": "x"}}, "prompt.variables.audience", 400),
    ({"id": "PROMPT", "variables": {"topic": "x", "audience": "y", "mood": "z"}}, "prompt.variables.mood", 400),
    ({"id": "PROMPT", "variables": {"topic": 3, "audience": "y"}}, "prompt.variables.topic", 400),
    ({"id": "PROMPT", "version": "latest"}, "prompt.version", 400),
])
def test_an_unknown_prompt_or_a_missing_variable_is_a_4xx_naming_it(stack: Stack, prompt: dict[str, Any], param: str, status: int) -> None:
    prompt_id = stack.call("post", "/prompts", {"prompt": TEMPLATE})["prompt_id"]
    if prompt["id"] == "PROMPT":
        prompt = {**prompt, "id": prompt_id}
    with pytest.raises(openai.APIStatusError) as refused:
        stack.client.responses.create(model="fake-model", input="hi", prompt=prompt)  # type: ignore[arg-type]
    assert refused.value.status_code == status and refused.value.body["param"] == param  # type: ignore[index]
