"""Reasoning from upstreams that return its text: summaries written by a model call
(`reasoning.summary`), and encrypted reasoning: with `include: ["reasoning.encrypted_content"]` a
reasoning item carries its content sealed with the server's key, and a client that keeps nothing
on the server (`store: false`) sends it back for the model to read again. Anything else is a 400."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from fake_upstream.app import REASONING_TEXT
from fake_upstream.server import FakeUpstream, running_fake_upstream
from providers.responses.sealing import ReasoningSeal
from runtime.library_client import LibraryClient
from support.live_stack import run_yaml, served

INCLUDE: Any = ["reasoning.encrypted_content"]
SUMMARY = f"You said: {REASONING_TEXT}"  # the fake upstream's answer to the summary request


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeUpstream
    state: Path


def config(root: Path, upstream: str, responses_config: str = "{}") -> Path:
    return run_yaml(root, upstream, responses=responses_config, name="reasoning")


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("reasoning")
    with running_fake_upstream() as upstream:
        with served(request.param, config(root, upstream.base_url)) as client:
            yield Stack(client, upstream, root / "state")


def test_a_stateless_client_keeps_its_reasoning_across_turns(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-reasoner", input="[tokens:3] think first", store=False, include=INCLUDE)
    reasoning, message = first.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content and reasoning.encrypted_content.startswith("v1.")
    assert REASONING_TEXT not in reasoning.encrypted_content
    # as agents send it back: the sealed item without its readable content
    returned = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content}
    stack.client.responses.create(model="fake-model", store=False, input=[
        {"role": "user", "content": "[tokens:3] think first"}, returned,  # type: ignore[list-item]
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": message.content[0].text}]},  # type: ignore[union-attr]
        {"role": "user", "content": "[tokens:2] and now?"}])
    assistant = [m for m in stack.upstream.bodies()[-1]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["reasoning_content"] == REASONING_TEXT


def test_without_include_nothing_is_sealed(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-reasoner", input="[tokens:3] think", store=False)
    assert response.output[0].type == "reasoning" and response.output[0].encrypted_content is None  # type: ignore[union-attr]


def test_a_stream_seals_the_item_it_finishes(stack: Stack) -> None:
    events = list(stack.client.responses.create(model="fake-reasoner", input="[tokens:3] think", store=False, include=INCLUDE, stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "reasoning"]  # type: ignore[union-attr]
    assert len(done) == 1 and done[0].encrypted_content.startswith("v1.")  # type: ignore[union-attr]
    assert events[-1].response.output[0].encrypted_content == done[0].encrypted_content  # type: ignore[union-attr]


def _sealed(stack: Stack) -> str:
    response = stack.client.responses.create(model="fake-reasoner", input="[tokens:3] think", store=False, include=INCLUDE)
    return str(response.output[0].encrypted_content)  # type: ignore[union-attr]


@pytest.mark.parametrize("forge", [
    lambda token: token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB"),  # altered
    lambda token: ReasoningSeal(lambda: b"k" * 32).seal({"content": [{"type": "reasoning_text", "text": "forged"}]}),  # another key
    lambda token: "not a token at all",
])
def test_altered_or_foreign_ciphertext_is_a_400_naming_the_item(stack: Stack, forge: Any) -> None:
    token = forge(_sealed(stack))
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-model", store=False, input=[
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": token},  # type: ignore[list-item]
            {"role": "user", "content": "hi"}])
    assert refused.value.body["param"] == "input[0].encrypted_content"  # type: ignore[index]
    assert refused.value.body["code"] == "invalid_encrypted_content"  # type: ignore[index]


def test_the_default_key_is_kept_by_the_state_directory_for_its_owner_only(stack: Stack) -> None:
    _sealed(stack)
    key = stack.state / "reasoning.key"
    assert key.exists() and stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_configured_key_survives_restarts_and_a_malformed_one_fails_at_start(tmp_path: Path) -> None:
    key = "A" * 43 + "="
    with running_fake_upstream() as upstream:
        path = config(tmp_path, upstream.base_url, f'{{reasoning_key: "{key}"}}')
        with LibraryClient(path, env={}) as library:
            token = library.openai(max_retries=0).responses.create(model="fake-reasoner", input="[tokens:2] t", store=False,
                                                                  include=INCLUDE).output[0].encrypted_content  # type: ignore[union-attr]
        (tmp_path / "state" / "reasoning.key").unlink(missing_ok=True)
        with LibraryClient(path, env={}) as library:
            library.openai(max_retries=0).responses.create(model="fake-model", store=False, input=[
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": token},  # type: ignore[list-item]
                {"role": "user", "content": "[tokens:2] hi"}])
        assert not (tmp_path / "state" / "reasoning.key").exists()
        with pytest.raises(Exception) as refused, LibraryClient(config(tmp_path, upstream.base_url, '{reasoning_key: "short"}'), env={}):
            pass
    assert "reasoning_key" in str(refused.value) and "32 bytes" in str(refused.value)


def test_a_summary_is_written_by_a_model_call_and_streamed_before_the_item_is_done(stack: Stack) -> None:
    events = list(stack.client.responses.create(model="fake-reasoner", input="[tokens:3] think", reasoning={"summary": "concise"},
                                                stream=True))
    kinds = [event.type for event in events]
    start = kinds.index("response.reasoning_text.done")
    assert kinds[start:start + 7] == ["response.reasoning_text.done", "response.content_part.done",
                                      "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                                      "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                                      "response.output_item.done"]
    summary_done = events[start + 4]
    assert summary_done.text == SUMMARY and summary_done.summary_index == 0  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    assert [(part.type, part.text) for part in final.output[0].summary] == [("summary_text", SUMMARY)]
    assert final.reasoning.summary == "concise"
    asked = [body for body in stack.upstream.bodies() if body["messages"][0]["role"] == "system"
             and "Summarize the reasoning" in body["messages"][0]["content"]][-1]
    assert asked["messages"][1]["content"] == REASONING_TEXT and "one short sentence" in asked["messages"][0]["content"]
    stored = stack.client.responses.retrieve(final.id)
    assert stored.output[0].summary[0].text == SUMMARY  # type: ignore[union-attr]


def test_a_summary_and_sealed_content_travel_together(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-reasoner", input="[tokens:3] think", reasoning={"summary": "auto"},
                                             store=False, include=INCLUDE)
    item = response.output[0]
    opened = ReasoningSeal(lambda: _key(stack)).open(item.encrypted_content, "x")  # type: ignore[union-attr]
    assert opened["summary"] == [{"type": "summary_text", "text": SUMMARY}]


def _key(stack: Stack) -> bytes:
    import base64

    return base64.b64decode((stack.state / "reasoning.key").read_bytes().strip())


@pytest.mark.parametrize(("reasoning", "param"), [({"summary": "short"}, "reasoning.summary"), ({"effort": "max-ish"}, "reasoning.effort"),
                                                  ({"sumary": "auto"}, "reasoning.sumary")])
def test_a_malformed_reasoning_object_is_a_400_naming_the_field(stack: Stack, reasoning: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-reasoner", input="hi", reasoning=reasoning)  # type: ignore[arg-type]
    assert refused.value.body["param"] == param  # type: ignore[index]


def test_a_model_without_reasoning_gets_no_summary_call(stack: Stack) -> None:
    before = len(stack.upstream.bodies())
    response = stack.client.responses.create(model="fake-model", input="[tokens:2] hi", reasoning={"summary": "auto"})
    assert [item.type for item in response.output] == ["message"] and len(stack.upstream.bodies()) == before + 1
