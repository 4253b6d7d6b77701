"""Tools the client runs, beyond functions (issue 15, item 1): custom, namespace, apply_patch,
shell and local_shell, offered to a chat model as functions and answered as their own output
items, whose outputs come back as input on the next turn. Through the openai SDK, streamed and
not, in server and library modes, against the fake upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from support.codex import APPLY_PATCH_GRAMMAR
from support.live_stack import run_yaml, served


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeUpstream

    def last_chat(self) -> dict[str, Any]:
        return self.upstream.bodies("/v1/chat/completions")[-1]


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_fake_upstream() as upstream:
        with served(request.param, run_yaml(tmp_path_factory.mktemp("client-tools"), upstream.base_url, name="client-tools")) as client:
            yield Stack(client, upstream)


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"[tool:{name} {json.dumps(arguments)}]"


PATCH_TOOL = {"type": "custom", "name": "apply_diff", "description": "Apply a diff to the workspace",
              "format": {"type": "grammar", "syntax": "regex", "definition": r"\*\*\* Begin Patch[\s\S]*"}}


def test_a_custom_tool_is_called_with_freeform_input_and_its_output_read_on_the_next_turn(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", tools=[PATCH_TOOL],
                                          input=call("apply_diff", {"input": "*** Begin Patch\n+hello"}))
    (item,) = first.output
    assert item.type == "custom_tool_call" and item.name == "apply_diff" and item.input == "*** Begin Patch\n+hello"
    offered = stack.last_chat()["tools"][0]["function"]
    assert offered["name"] == "apply_diff" and "regex grammar" in offered["description"]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, tools=[PATCH_TOOL], input=[
        {"type": "custom_tool_call_output", "call_id": item.call_id, "output": "patched 1 file"}])
    assert second.output_text == "Tool result: patched 1 file"
    messages = stack.last_chat()["messages"]
    assert messages[-2]["tool_calls"][0]["function"] == {"name": "apply_diff", "arguments": json.dumps({"input": "*** Begin Patch\n+hello"})}
    assert messages[-1] == {"role": "tool", "tool_call_id": item.call_id, "content": "patched 1 file"}


def test_a_streamed_custom_tool_call_sends_its_input_events(stack: Stack) -> None:
    events = list(stack.client.responses.create(model="fake-model", tools=[PATCH_TOOL], stream=True,
                                                input=call("apply_diff", {"input": "*** Begin Patch"})))
    kinds = [event.type for event in events]
    at = kinds.index("response.custom_tool_call_input.delta")
    assert kinds[at - 1:at + 3] == ["response.output_item.added", "response.custom_tool_call_input.delta",
                                    "response.custom_tool_call_input.done", "response.output_item.done"]
    done = events[at + 1]
    assert done.input == "*** Begin Patch" and events[-1].response.output[0].type == "custom_tool_call"  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_namespace_is_flattened_for_the_model_and_its_calls_regrouped(stack: Stack) -> None:
    crm = {"type": "namespace", "name": "crm", "description": "The CRM", "tools": [
        {"type": "function", "name": "lookup", "description": "Find a customer",
         "parameters": {"type": "object", "properties": {"email": {"type": "string"}}}},
        {"type": "custom", "name": "note", "description": "Write a note"}]}
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}  # the same name outside
    first = stack.client.responses.create(model="fake-model", tools=[crm, lookup], input=call("crm__lookup", {"email": "a@b.c"}))
    (item,) = first.output
    assert (item.type, item.name, item.namespace, item.arguments) == ("function_call", "lookup", "crm", '{"email": "a@b.c"}')  # type: ignore[union-attr]
    assert [tool["function"]["name"] for tool in stack.last_chat()["tools"]] == ["crm__lookup", "crm__note", "lookup"]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": item.call_id, "output": "Ada"}], tools=[crm, lookup])
    assert second.output_text == "Tool result: Ada"
    assert stack.last_chat()["messages"][-2]["tool_calls"][0]["function"]["name"] == "crm__lookup"


def test_apply_patch_calls_carry_their_operation_and_their_outputs_go_back(stack: Stack) -> None:
    operation = {"type": "create_file", "path": "notes/a.md", "diff": "+# Notes\n"}
    first = stack.client.responses.create(model="fake-model", tools=[{"type": "apply_patch"}], input=call("apply_patch", operation))
    (item,) = first.output
    assert item.type == "apply_patch_call" and item.status == "completed"
    assert item.operation.model_dump() == operation  # type: ignore[union-attr]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, tools=[{"type": "apply_patch"}], input=[
        {"type": "apply_patch_call_output", "call_id": item.call_id, "status": "failed", "output": "notes/ does not exist"}])
    assert second.output_text == "Tool result: failed: notes/ does not exist"


def test_shell_calls_carry_their_commands_and_their_outputs_go_back(stack: Stack) -> None:
    tool = {"type": "shell", "environment": {"type": "local"}}
    first = stack.client.responses.create(model="fake-model", tools=[tool], input=call("shell", {"commands": ["ls", "pwd"], "timeout_ms": 5000}))
    (item,) = first.output
    assert item.type == "shell_call" and item.action.commands == ["ls", "pwd"] and item.action.timeout_ms == 5000  # type: ignore[union-attr]
    assert item.environment is not None and item.environment.type == "local"  # type: ignore[union-attr]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, tools=[tool], input=[
        {"type": "shell_call_output", "call_id": item.call_id,
         "output": [{"stdout": "a.txt", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                    {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]}])
    assert second.output_text == "Tool result: a.txt\n(exit code 0)\n\n(timed out)"


def test_a_streamed_shell_call_sends_its_command_events(stack: Stack) -> None:
    events = list(stack.client.responses.create(model="fake-model", tools=[{"type": "shell"}], stream=True,
                                                input=call("shell", {"commands": ["ls", "pwd"]})))
    commands = [(e.type.rsplit(".", 1)[1], e.command_index, getattr(e, "delta", None) or getattr(e, "command", None))  # type: ignore[union-attr]
                for e in events if e.type.startswith("response.shell_call_command.")]
    assert commands == [("added", 0, ""), ("delta", 0, "ls"), ("done", 0, "ls"), ("added", 1, ""), ("delta", 1, "pwd"), ("done", 1, "pwd")]


def test_local_shell_calls_are_exec_actions_answered_by_id(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", tools=[{"type": "local_shell"}],
                                          input=call("local_shell", {"command": ["git", "status"], "working_directory": "/src"}))
    (item,) = first.output
    assert item.type == "local_shell_call" and item.action.command == ["git", "status"]  # type: ignore[union-attr]
    assert item.action.working_directory == "/src"  # type: ignore[union-attr]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, tools=[{"type": "local_shell"}], input=[
        {"type": "local_shell_call_output", "id": item.call_id, "output": "clean"}])  # type: ignore[list-item]
    assert second.output_text == "Tool result: clean"


def test_tool_choice_can_force_a_client_tool_of_any_type(stack: Stack) -> None:
    stack.client.responses.create(model="fake-model", tools=[PATCH_TOOL, {"type": "apply_patch"}], input="hi",
                                  tool_choice={"type": "custom", "name": "apply_diff"})
    sent = stack.last_chat()
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "apply_diff"}}
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["apply_diff"]
    stack.client.responses.create(model="fake-model", tools=[PATCH_TOOL, {"type": "apply_patch"}], input="hi",
                                  tool_choice={"type": "apply_patch"})
    assert stack.last_chat()["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}


@pytest.mark.parametrize(("tools", "param"), [
    ([{"type": "custom", "name": "x"}, {"type": "function", "name": "x"}], "tools[1]"),
    ([{"type": "namespace", "name": "n", "description": "d", "tools": [{"type": "web_search"}]}], "tools[0].tools[0].type"),
    ([{"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "regex", "definition": "("}}], "tools[0].format.definition"),
    ([{"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "lark", "definition": "start: nowhere"}}],
     "tools[0].format.definition"),
    ([{"type": "teleport"}], "tools[0].type"),
])
def test_malformed_client_tools_are_a_400_naming_the_field(stack: Stack, tools: list[dict[str, Any]], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-model", input="hi", tools=tools)  # type: ignore[arg-type]
    assert refused.value.body["param"] == param  # type: ignore[index]


LARK_PATCH_TOOL = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch",
                   "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR}}
OFF_GRAMMAR = "*** Begin Patch\n*** Rename File: a.py\n*** End Patch\n"
ON_GRAMMAR = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"


def fix(name: str, arguments: dict[str, Any]) -> str:
    return f"[fix:{name} {json.dumps(arguments)}]"


def test_a_custom_call_outside_its_grammar_goes_back_to_the_model_and_only_a_matching_one_is_output(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-model", tools=[LARK_PATCH_TOOL],
                                             input=call("apply_patch", {"input": OFF_GRAMMAR}) + fix("apply_patch", {"input": ON_GRAMMAR}))
    (item,) = response.output
    assert item.type == "custom_tool_call" and item.input == ON_GRAMMAR and response.status == "completed"
    refused_call, refusal = stack.last_chat()["messages"][-2:]
    assert refused_call["tool_calls"][0]["function"]["arguments"] == json.dumps({"input": OFF_GRAMMAR})
    assert refusal["role"] == "tool" and refusal["content"] == (
        "Refused: the input does not match the lark grammar at line 2, column 5, at 'Rename File: a.py\\n*** End Patch\\n'. "
        "Call the tool again with input that matches its grammar.")
    # The refusal is the model's affair only: the chain goes on from the call that matched.
    stack.client.responses.create(model="fake-model", previous_response_id=response.id, tools=[LARK_PATCH_TOOL], input=[
        {"type": "custom_tool_call_output", "call_id": item.call_id, "output": "patched"}])
    answered = [message for message in stack.last_chat()["messages"] if message["role"] != "user"]
    assert [call["function"]["arguments"] for call in answered[0]["tool_calls"]] == [json.dumps({"input": ON_GRAMMAR})]
    assert answered[1:] == [{"role": "tool", "tool_call_id": item.call_id, "content": "patched"}]


def test_a_streamed_custom_call_outside_its_grammar_is_never_announced(stack: Stack) -> None:
    events = list(stack.client.responses.create(model="fake-model", tools=[LARK_PATCH_TOOL], stream=True, input=call(
        "apply_patch", {"input": OFF_GRAMMAR}) + fix("apply_patch", {"input": ON_GRAMMAR})))
    inputs = [event.input for event in events if event.type == "response.custom_tool_call_input.done"]  # type: ignore[union-attr]
    assert inputs == [ON_GRAMMAR]
    assert {event.output_index for event in events if hasattr(event, "output_index")} == {0}  # type: ignore[union-attr]
    assert events[-1].type == "response.completed" and [e.sequence_number for e in events] == list(range(len(events)))


def test_a_model_that_keeps_missing_the_grammar_fails_the_response(stack: Stack) -> None:
    with pytest.raises(openai.APIStatusError) as failed:
        stack.client.responses.create(model="fake-model", tools=[LARK_PATCH_TOOL], input=call("apply_patch", {"input": OFF_GRAMMAR}) + "[again]")
    assert failed.value.status_code == 502 and failed.value.body["code"] == "tool_input_mismatch"  # type: ignore[index]
    assert "'apply_patch' did not match the tool's grammar after 3 attempts" in failed.value.message
    with pytest.raises(openai.APIStatusError) as streamed:  # streamed: nothing was output, so the same error
        list(stack.client.responses.create(model="fake-model", tools=[LARK_PATCH_TOOL], stream=True,
                                           input=call("apply_patch", {"input": OFF_GRAMMAR}) + "[again]"))
    assert streamed.value.status_code == 502 and streamed.value.body["code"] == "tool_input_mismatch"  # type: ignore[index]
    events = list(stack.client.responses.create(model="fake-model", tools=[LARK_PATCH_TOOL], stream=True, background=True,
                                                input=call("apply_patch", {"input": OFF_GRAMMAR}) + "[again]"))
    final = events[-1]
    assert final.type == "response.failed" and final.response.error is not None  # type: ignore[union-attr]
    assert final.response.error.code == "server_error" and "did not match the tool's grammar" in final.response.error.message  # type: ignore[union-attr]
    assert final.response.output == [] and not any(e.type.startswith("response.custom_tool_call") for e in events)  # type: ignore[union-attr]


def test_a_refused_call_beside_a_function_call_is_repaired_and_both_reach_the_client(stack: Stack) -> None:
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    response = stack.client.responses.create(model="fake-model", tools=[lookup, LARK_PATCH_TOOL], input=(
        call("lookup", {}) + call("apply_patch", {"input": OFF_GRAMMAR}) + fix("apply_patch", {"input": ON_GRAMMAR})))
    assert [(item.type, getattr(item, "name", None)) for item in response.output] == [("function_call", "lookup"), ("custom_tool_call", "apply_patch")]
    roles = [(message["role"], message.get("content")) for message in stack.last_chat()["messages"][-4:]]
    assert roles[1] == ("tool", "Sent to the client; its result comes later.") and roles[3][0] == "tool"


def test_client_tool_items_are_accepted_as_input_without_a_chain(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-model", tools=[{"type": "shell"}], input=[
        {"role": "user", "content": "list files"},
        {"type": "shell_call", "call_id": "call_1", "action": {"commands": ["ls"]}, "status": "completed"},
        {"type": "shell_call_output", "call_id": "call_1", "output": [{"stdout": "b.txt", "stderr": "",
                                                                        "outcome": {"type": "exit", "exit_code": 0}}]}])
    assert response.output_text == "Tool result: b.txt\n(exit code 0)"


CODEX_TOOLS: list[dict[str, Any]] = [  # the shapes of the Codex CLI's first request (function, namespace and web_search tools)
    {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"], "additionalProperties": False}},
    {"type": "namespace", "name": "mcp__docs__", "description": "Tools of the docs MCP server",
     "tools": [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]},
    {"type": "web_search", "external_web_access": True},
    PATCH_TOOL,
]


def codex_request(**more: Any) -> dict[str, Any]:
    return {"model": "fake-reasoner", "instructions": "You are a coding agent.", "tools": CODEX_TOOLS, "tool_choice": "auto",
            "parallel_tool_calls": False, "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "session-1",
            "extra_body": {"client_metadata": {"session_id": "s1"}}, **more}  # not a parameter of this SDK version


def test_a_server_side_tool_without_a_provider_is_a_400_by_default(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(**codex_request(input="hi"))
    assert refused.value.body["param"] == "tools[2].type" and "web_search" in refused.value.message  # type: ignore[index]


@pytest.fixture(scope="module", params=["server", "library"])
def omitting(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose run.yaml leaves unserved server-side tools out of the model's view."""
    with running_fake_upstream() as upstream:
        config = run_yaml(tmp_path_factory.mktemp("omit"), upstream.base_url, responses="{unserved_tools: omit}", name="omit")
        with served(request.param, config) as client:
            yield Stack(client, upstream)


def test_the_codex_clis_first_request_is_answered_when_unserved_tools_are_omitted(omitting: Stack) -> None:
    events = list(omitting.client.responses.create(**codex_request(input=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": call("mcp__docs____search", {"q": "x"})}]}])))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed" and [tool.type for tool in final.tools] == ["function", "namespace", "web_search", "custom"]
    reasoning, function_call = final.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content and reasoning.summary
    assert (function_call.name, function_call.namespace) == ("search", "mcp__docs__")  # type: ignore[union-attr]
    sent = [body for body in omitting.upstream.bodies("/v1/chat/completions") if "tools" in body][-1]  # not the summary's call
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["exec_command", "mcp__docs____search", "apply_diff"]
    follow = list(omitting.client.responses.create(**codex_request(input=[
        *[item.model_dump(exclude_none=True) for item in final.output],
        {"type": "function_call_output", "call_id": function_call.call_id, "output": "found it"}])))
    assert follow[-1].response.output_text == "Tool result: found it"  # type: ignore[union-attr]


def test_an_assistant_messages_phase_is_kept_in_stored_items_and_chains(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", input=[
        {"role": "user", "content": "fix the bug"},
        {"type": "message", "role": "assistant", "content": "Looking at the code first.", "phase": "commentary"},
        {"role": "user", "content": "[tokens:1] go on"}])
    items = stack.client.responses.input_items.list(first.id, order="asc").data
    assert [getattr(item, "phase", None) for item in items] == [None, "commentary", None]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, input="[tokens:1] and?")
    assert second.status == "completed"
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-model", input=[{"type": "message", "role": "assistant", "content": "x", "phase": "draft"}])
    assert refused.value.body["param"] == "input[0].phase"  # type: ignore[index]


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city", "defer_loading": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
SEARCHABLE: list[dict[str, Any]] = [{"type": "tool_search", "execution": "client"}, WEATHER, {"type": "function", "name": "echo"}]


def test_deferred_tools_reach_the_model_only_once_a_client_tool_search_loads_them(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", tools=SEARCHABLE, input=call("tool_search", {"query": "weather"}))
    (search,) = first.output
    assert search.type == "tool_search_call" and search.execution == "client" and search.arguments == {"query": "weather"}  # type: ignore[union-attr]
    assert [tool["function"]["name"] for tool in stack.last_chat()["tools"]] == ["tool_search", "echo"]
    second = stack.client.responses.create(model="fake-model", previous_response_id=first.id, tools=SEARCHABLE, input=[
        {"type": "tool_search_output", "call_id": search.call_id, "execution": "client", "status": "completed",  # type: ignore[union-attr]
         "tools": [{k: v for k, v in WEATHER.items() if k != "defer_loading"}]},
        {"role": "user", "content": call("get_weather", {"city": "Oslo"})}])
    sent = stack.last_chat()
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["tool_search", "get_weather", "echo"]
    assert {"role": "tool", "tool_call_id": search.call_id, "content": "Tools loaded: get_weather: The weather in a city"} in sent["messages"]  # type: ignore[union-attr]
    (weather,) = second.output
    assert weather.type == "function_call" and weather.name == "get_weather"  # type: ignore[union-attr]


def test_a_tool_search_run_by_the_server_is_a_400_saying_to_run_it_on_the_client(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-model", input="hi", tools=[{"type": "tool_search"}])  # type: ignore[list-item]
    assert refused.value.body["param"] == "tools[0].execution"  # type: ignore[index]
