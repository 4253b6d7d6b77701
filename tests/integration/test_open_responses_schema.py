"""Every response body and stream event of the Responses API, as the server sends it on the wire,
checked against the schema of the openai SDK's types and the Open Responses specification's
additions (tests/support/open_responses.py), not by hand (issue 15, items 4 and 5): plain
answers, function and client tool calls, reasoning (sealed and summarised), refusals, a cut
answer, a failed one, a background stream, compaction, and a retrieved response. In server and
library modes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served
from support.open_responses import event_problems, response_problems


@pytest.fixture(scope="module", params=["server", "library"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with running_fake_upstream() as upstream:
        with served(request.param, run_yaml(tmp_path_factory.mktemp("schema"), upstream.base_url, name="schema")) as client:
            yield client


def body_of(client: openai.OpenAI, **request: Any) -> dict[str, Any]:
    return json.loads(client.responses.with_raw_response.create(**request).text)


def events_of(client: openai.OpenAI, **request: Any) -> list[dict[str, Any]]:
    raw = client.responses.with_raw_response.create(stream=True, **request)
    text = raw.http_response.read().decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
CASES: dict[str, dict[str, Any]] = {
    "text": {"model": "fake-model", "input": "[tokens:3] hi", "metadata": {"k": "v"}, "temperature": 0.5},
    "function call": {"model": "fake-model", "input": '[tool:lookup {"q": "x"}]', "tools": [FUNCTION]},
    "custom tool call": {"model": "fake-model", "input": '[tool:patch {"input": "*** Begin Patch"}]',
                         "tools": [{"type": "custom", "name": "patch", "description": "Apply a patch"}]},
    "apply_patch and shell": {"model": "fake-model", "input": '[tool:apply_patch {"type": "delete_file", "path": "a"}] '
                              '[tool:shell {"commands": ["ls"]}]', "tools": [{"type": "apply_patch"}, {"type": "shell"}]},
    "tool search": {"model": "fake-model", "input": '[tool:tool_search {"query": "maps"}]',
                    "tools": [{"type": "tool_search", "execution": "client"}, {**FUNCTION, "defer_loading": True}]},
    "reasoning": {"model": "fake-reasoner", "input": "[tokens:2] think", "reasoning": {"effort": "low", "summary": "auto"},
                  "include": ["reasoning.encrypted_content"], "store": False},
    "refusal": {"model": "fake-model", "input": "[refusal] no"},
    "cut by max_output_tokens": {"model": "fake-model", "input": "[tokens:60] long", "max_output_tokens": 16},
    "compaction": {"model": "fake-model", "input": "word " * 200, "context_management": [{"type": "compaction", "compact_threshold": 20}]},
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_response_body_conforms(client: openai.OpenAI, case: str) -> None:
    body = body_of(client, **CASES[case])
    assert response_problems(body) == []
    assert body["status"] in ("completed", "incomplete") and body["output"]


@pytest.mark.parametrize("case", list(CASES))
def test_every_event_of_a_stream_conforms(client: openai.OpenAI, case: str) -> None:
    events = events_of(client, **CASES[case])
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [problem for event in events for problem in event_problems(event)] == []


def test_a_failed_response_and_its_events_conform(client: openai.OpenAI) -> None:
    events = events_of(client, model="fake-model", input="[error:500] boom", background=True)  # accepted, then failed
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["error"]["code"]
    assert [problem for event in events for problem in event_problems(event)] == []


def test_a_background_stream_and_the_stored_response_conform(client: openai.OpenAI) -> None:
    events = events_of(client, model="fake-model", input="[tokens:4] later", background=True)
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [problem for event in events for problem in event_problems(event)] == []
    stored = json.loads(client.responses.with_raw_response.retrieve(events[-1]["response"]["id"]).text)
    assert response_problems(stored) == [] and stored["background"] is True and isinstance(stored["completed_at"], int)


def test_the_checker_finds_what_does_not_conform() -> None:
    assert any("created_at" in problem for problem in response_problems({"id": "resp_1", "created_at": 1.5}))
    assert event_problems({"type": "response.output_text.delta", "delta": 3})  # no item_id, a delta of the wrong type
    assert event_problems({"type": "response.made_up"}) == ["event: unknown type 'response.made_up'"]
