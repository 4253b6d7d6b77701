"""WebSocket mode of the Responses API (issue 15, item 2), through the openai SDK's
`client.responses.connect()` against the server: the same events as SSE, store: false chains
continued within the connection, errors as events on a socket that stays open, `generate: false`,
and a client that leaves mid-response."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.library_client import LibraryClient, NoWebSocketTransport
from support.live_stack import run_yaml, served

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeUpstream


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_fake_upstream() as upstream:
        with served("server", run_yaml(tmp_path_factory.mktemp("ws"), upstream.base_url, name="ws")) as client:
            yield Stack(client, upstream)


def turn(connection: Any, **create: Any) -> list[Any]:
    """Send one response.create and read its events up to the last one."""
    connection.response.create(**create)
    events = []
    for event in connection:
        events.append(event)
        if event.type in TERMINAL:
            return events
    raise AssertionError("the connection closed mid-response")


def test_a_response_over_a_websocket_sends_the_events_of_a_streamed_post(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        events = turn(connection, model="fake-model", input="[tokens:3] hi")
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "tok1 tok2 tok3"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    http = [event.type for event in stack.client.responses.create(model="fake-model", input="[tokens:3] hi", stream=True)]
    assert kinds == http
    assert stack.client.responses.retrieve(events[-1].response.id).output_text == "tok1 tok2 tok3"  # stored, as over HTTP


def test_store_false_chains_continue_within_the_connection(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        first = turn(connection, model="fake-model", input="my name is Ada", store=False)[-1].response
        second = turn(connection, model="fake-model", input="what is my name?", store=False, previous_response_id=first.id)
        third = turn(connection, model="fake-model", input="and again?", store=False, previous_response_id=second[-1].response.id)
    assert second[-1].type == "response.completed" and second[-1].response.previous_response_id == first.id
    assert third[-1].type == "response.completed"
    sent = [m["content"] for m in stack.upstream.bodies("/v1/chat/completions")[-1]["messages"] if m["role"] == "user"]
    assert sent == ["my name is Ada", "what is my name?", "and again?"]
    with pytest.raises(openai.NotFoundError):  # nothing of it was stored
        stack.client.responses.retrieve(first.id)


def test_an_unstored_chain_may_start_from_a_stored_response(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        stored = turn(connection, model="fake-model", input="stored first")[-1].response
        second = turn(connection, model="fake-model", input="then unstored", store=False, previous_response_id=stored.id)[-1].response
        third = turn(connection, model="fake-model", input="and on", store=False, previous_response_id=second.id)[-1]
    assert third.type == "response.completed" and third.response.previous_response_id == second.id
    sent = [m["content"] for m in stack.upstream.bodies("/v1/chat/completions")[-1]["messages"] if m["role"] == "user"]
    assert sent == ["stored first", "then unstored", "and on"]


def test_mistakes_are_error_events_and_the_socket_stays_open(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        missing = turn(connection, model="fake-model", input="hi", store=False, previous_response_id="resp_unknown")
        assert missing[-1].type == "error" and missing[-1].status == 400  # as OpenAI answers it, and as over HTTP
        assert missing[-1].error.code == "previous_response_not_found" and missing[-1].error.param == "previous_response_id"
        connection.send({"type": "response.create", "model": "fake-model", "input": "hi", "temprature": 0.5})  # type: ignore[typeddict-unknown-key]
        unknown_field = [connection.recv()]
        assert unknown_field[-1].type == "error" and unknown_field[-1].status == 400
        assert unknown_field[-1].error.code == "unknown_parameter" and unknown_field[-1].error.param == "temprature"
        bad = turn(connection, model="fake-model", input="hi", max_output_tokens=2)
        assert bad[-1].type == "error" and bad[-1].status == 400 and bad[-1].error.param == "max_output_tokens"
        unknown = turn(connection, model="no-such-model", input="hi")
        assert unknown[-1].type == "error" and unknown[-1].error.code == "model_not_found"
        refused = turn(connection, model="fake-model", input="[error:400] refused by the model server")
        assert [event.type for event in refused] == ["error"] and refused[0].status == 400  # no opening events for it
        connection.send({"type": "response.cancel"})  # type: ignore[arg-type, typeddict-item]
        wrong = connection.recv()
        assert wrong.type == "error" and wrong.error.param == "type"
        connection.send({"type": "response.create", "model": "fake-model", "input": "a\ud800"})  # a lone surrogate: no text
        surrogate = connection.recv()
        assert surrogate.type == "error" and surrogate.error.code == "invalid_json"
        fine = turn(connection, model="fake-model", input="[tokens:1] still here")
        assert fine[-1].type == "response.completed" and fine[-1].response.output_text == "tok1"


def test_a_failed_continuation_evicts_the_response_it_continued(stack: Stack) -> None:
    """Open Responses: a turn continuing a cached response that fails (refused, or ended
    response.failed) evicts that response, so continuing it again is previous_response_not_found."""
    with stack.client.responses.connect() as connection:
        first = turn(connection, model="fake-model", input="[tokens:1] remember", store=False)[-1].response
        failed = turn(connection, model="fake-model", input="[error:500] the model server falls over", store=False,
                      previous_response_id=first.id)
        assert failed[-1].type in ("error", "response.failed")
        again = turn(connection, model="fake-model", input="[tokens:1] try again", store=False, previous_response_id=first.id)
        assert again[-1].type == "error" and again[-1].status == 400 and again[-1].error.code == "previous_response_not_found"
        second = turn(connection, model="fake-model", input="[tokens:1] remember", store=False)[-1].response
        refused = turn(connection, model="fake-model", input="hi", store=False, previous_response_id=second.id, max_output_tokens=2)
        assert refused[-1].type == "error" and refused[-1].status == 400
        gone = turn(connection, model="fake-model", input="[tokens:1] go on", store=False, previous_response_id=second.id)
        assert gone[-1].type == "error" and gone[-1].error.code == "previous_response_not_found"
        stored = turn(connection, model="fake-model", input="[tokens:1] kept in the store")[-1].response
        turn(connection, model="fake-model", input="[error:500] falls over", previous_response_id=stored.id)
        from_store = turn(connection, model="fake-model", input="[tokens:1] go on", previous_response_id=stored.id)
        assert from_store[-1].type == "response.completed"  # a stored response is still in the store


def test_generate_false_prepares_a_context_without_a_model_call(stack: Stack) -> None:
    before = len(stack.upstream.bodies("/v1/chat/completions"))
    with stack.client.responses.connect() as connection:
        warm = turn(connection, model="fake-model", input="remember: the code is 42", store=False, generate=False)
        assert [e.type for e in warm] == ["response.created", "response.completed"] and warm[-1].response.output == []
        assert len(stack.upstream.bodies("/v1/chat/completions")) == before
        answer = turn(connection, model="fake-model", input="the code?", store=False, previous_response_id=warm[-1].response.id)
    assert answer[-1].type == "response.completed"
    sent = [m["content"] for m in stack.upstream.bodies("/v1/chat/completions")[-1]["messages"] if m["role"] == "user"]
    assert sent == ["remember: the code is 42", "the code?"]


def test_stream_ids_are_echoed_on_every_event(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.send({"type": "response.create", "model": "fake-model", "input": "[tokens:2] x", "stream_id": "lane-1"})  # type: ignore[typeddict-unknown-key]
        events = []
        for event in connection:
            events.append(event)
            if event.type in TERMINAL:
                break
    assert {event.stream_id for event in events} == {"lane-1"}


def test_a_client_that_leaves_mid_response_leaves_it_cancelled_and_stored(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model="fake-model", input="[slow:50] [tokens:200] long")
        created = connection.recv()
        assert created.type == "response.created"
        response_id = created.response.id
        while connection.recv().type != "response.output_text.delta":
            pass
    deadline = time.monotonic() + 10
    while (stored := stack.client.responses.retrieve(response_id)).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stored.status == "cancelled" and stored.output_text and len(stored.output_text.split()) < 200


def test_the_library_client_says_it_has_no_websocket_transport(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream, LibraryClient(run_yaml(tmp_path, upstream.base_url), env={}) as library:
        with pytest.raises(NoWebSocketTransport, match="needs the server"):
            library.openai().responses.connect()
        with pytest.raises(NoWebSocketTransport):
            library.async_openai().responses.connect()


def test_a_codex_shaped_session_runs_over_one_socket(stack: Stack) -> None:
    """Codex's request shape (function, namespace and custom tools, reasoning summary, encrypted
    reasoning, store: false) over a socket: a tool call, its output, the answer."""
    tools: list[dict[str, Any]] = [
        {"type": "function", "name": "exec_command", "strict": False,
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
        {"type": "namespace", "name": "mcp__docs__", "description": "docs", "tools": [
            {"type": "function", "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]},
        {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}]
    shape = {"model": "fake-reasoner", "instructions": "You are a coding agent.", "tools": tools, "tool_choice": "auto",
             "parallel_tool_calls": False, "reasoning": {"summary": "auto"}, "store": False,
             "include": ["reasoning.encrypted_content"], "prompt_cache_key": "s1"}
    with stack.client.responses.connect() as connection:
        first = turn(connection, **shape, input='[tool:exec_command {"cmd": "ls"}]')
        final = first[-1].response
        reasoning, command = final.output
        assert reasoning.type == "reasoning" and reasoning.encrypted_content and command.name == "exec_command"
        second = turn(connection, **shape, previous_response_id=final.id, input=[
            {"type": "function_call_output", "call_id": command.call_id, "output": "a.txt"}])
    assert second[-1].type == "response.completed" and second[-1].response.output_text == "Tool result: a.txt"
