"""Create-response requests OpenAI refuses are refused here too, with OpenAI's status, code and
`param`, before any model call, streamed or not (issue 45, items 1 and 2): an unknown top-level
parameter, a tool output answering no call, a structured-output schema that is not JSON Schema, a
tool type nobody defines, and a previous response that is not there. Through the openai SDK, in
server and library modes, over the live fake upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from fake_mcp.servers import McpServers
from fake_upstream.server import FakeUpstream
from support.live_stack import run_yaml, served

FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def refusal(client: openai.OpenAI, upstream: FakeUpstream, stream: bool = False, **request: Any) -> openai.BadRequestError:
    """The 400 `request` gets, checked to have reached no model."""
    before = len(upstream.bodies("/v1/chat/completions"))
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(stream=stream, **request)
    assert len(upstream.bodies("/v1/chat/completions")) == before, "refused only after a model call"
    assert error.value.status_code == 400 and error.value.type == "invalid_request_error"
    return error.value


def message(error: openai.APIStatusError) -> str:
    """The error's own message (the SDK's `message` starts with the status)."""
    assert isinstance(error.body, dict)
    return str(error.body["message"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_unknown_top_level_parameter_is_a_400_naming_it(client: openai.OpenAI, upstream: FakeUpstream, stream: bool) -> None:
    error = refusal(client, upstream, stream, model="fake-model", input="hi", extra_body={"temprature": 0.2})
    assert error.code == "unknown_parameter" and error.param == "temprature"
    assert message(error) == "Unknown parameter: 'temprature'."


def test_openai_fields_not_acted_on_and_ogx_extensions_are_accepted(client: openai.OpenAI) -> None:
    answer = client.responses.create(model="fake-model", input="[tokens:1] hi", prompt_cache_retention="24h",
                                     extra_body={"client_metadata": {"turn": "1"}, "guardrails": [], "max_infer_iters": 3})
    assert answer.status == "completed"


def test_max_infer_iters_bounds_the_tool_loop(client: openai.OpenAI, upstream: FakeUpstream, mcp_servers: McpServers) -> None:
    """OGX's `max_infer_iters`: at most that many model calls; a response still calling tools after them is incomplete."""
    mcp = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open, "require_approval": "never"}
    before = len(upstream.bodies("/v1/chat/completions"))
    cut = client.responses.create(model="fake-model", tools=[mcp], input='[tool:echo {"text": "x"}]', extra_body={"max_infer_iters": 1})
    assert len(upstream.bodies("/v1/chat/completions")) == before + 1
    assert cut.status == "incomplete" and [item.type for item in cut.output] == ["mcp_list_tools", "mcp_call"]
    whole = client.responses.create(model="fake-model", tools=[mcp], input='[tool:echo {"text": "x"}]', extra_body={"max_infer_iters": 2})
    assert whole.status == "completed" and whole.output[-1].type == "message"
    refused = refusal(client, upstream, model="fake-model", input="hi", extra_body={"max_infer_iters": 0})
    assert refused.param == "max_infer_iters"


@pytest.mark.parametrize(("field", "value"), [("moderation", {"model": "omni-moderation-latest"}), ("shields", ["llama-guard"])])
def test_safety_asked_for_in_a_form_this_server_cannot_run_is_refused_not_dropped(client: openai.OpenAI, upstream: FakeUpstream,
                                                                                   field: str, value: Any) -> None:
    error = refusal(client, upstream, model="fake-model", input="hi", extra_body={field: value})
    assert error.param == field and error.code == "unsupported_parameter" and "guardrails" in message(error)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_function_call_output_answering_no_call_is_a_400(client: openai.OpenAI, upstream: FakeUpstream, stream: bool) -> None:
    error = refusal(client, upstream, stream, model="fake-model", tools=[FUNCTION],
                    input=[{"type": "function_call_output", "call_id": "call_nobody_made", "output": "42"}])
    assert error.param == "input" and error.code is None
    assert message(error) == "No tool call found for function call output with call_id call_nobody_made."


def test_a_custom_tool_output_answering_no_call_is_a_400(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    error = refusal(client, upstream, model="fake-model", input=[
        {"type": "message", "role": "user", "content": "go"},
        {"type": "custom_tool_call_output", "call_id": "call_x", "output": "done"}])
    assert error.param == "input" and "custom tool call output with call_id call_x" in message(error)


def test_outputs_answering_calls_of_the_input_the_chain_or_the_conversation_are_taken(client: openai.OpenAI) -> None:
    inline = client.responses.create(model="fake-model", tools=[FUNCTION], input=[
        {"type": "message", "role": "user", "content": "look it up"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "[tokens:1] found"}])
    assert inline.status == "completed"
    called = client.responses.create(model="fake-model", tools=[FUNCTION], input='[tool:lookup {"q": "x"}] look it up')
    call = next(item for item in called.output if item.type == "function_call")
    chained = client.responses.create(model="fake-model", tools=[FUNCTION], previous_response_id=called.id,
                                      input=[{"type": "function_call_output", "call_id": call.call_id, "output": "[tokens:1] found"}])
    assert chained.status == "completed"
    conversation = client.conversations.create(items=[
        {"type": "message", "role": "user", "content": "look it up"},
        {"type": "function_call", "call_id": "call_c", "name": "lookup", "arguments": "{}"}])
    continued = client.responses.create(model="fake-model", tools=[FUNCTION], conversation=conversation.id,
                                        input=[{"type": "function_call_output", "call_id": "call_c", "output": "[tokens:1] found"}])
    assert continued.status == "completed"


@pytest.mark.parametrize("schema", [{"type": "objekt"}, {"type": "object", "required": "name"},
                                    {"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}}], ids=repr)
def test_a_json_schema_format_that_is_not_json_schema_is_a_400(client: openai.OpenAI, upstream: FakeUpstream, schema: Any) -> None:
    error = refusal(client, upstream, model="fake-model", input="hi", text={"format": {"type": "json_schema", "name": "answer", "schema": schema}})
    assert error.param == "text.format.schema" and error.code == "invalid_json_schema"
    assert message(error).startswith("Invalid schema for response_format 'answer': ")


def test_a_valid_json_schema_format_is_taken(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}
    answer = client.responses.create(model="fake-model", input="[tokens:1] hi",
                                     text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}})
    assert answer.status == "completed"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_unknown_previous_response_is_openais_400(client: openai.OpenAI, upstream: FakeUpstream, stream: bool) -> None:
    error = refusal(client, upstream, stream, model="fake-model", input="hi", previous_response_id="resp_nothing_here")
    assert error.code == "previous_response_not_found" and error.param == "previous_response_id"
    assert "resp_nothing_here" in message(error)


@pytest.fixture(scope="module")
def omitting(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with served("server", run_yaml(tmp_path_factory.mktemp("omit"), upstream.base_url, responses="{unserved_tools: omit}")) as client:
        yield client


def test_unserved_tools_omit_leaves_out_openais_hosted_types_only(omitting: openai.OpenAI, upstream: FakeUpstream) -> None:
    answer = omitting.responses.create(model="fake-model", input="[tokens:1] hi", tools=[{"type": "web_search"}, {"type": "code_interpreter",
                                                                                                              "container": {"type": "auto"}}])
    assert answer.status == "completed"
    assert "tools" not in upstream.bodies("/v1/chat/completions")[-1]  # the model was offered neither
    error = refusal(omitting, upstream, model="fake-model", input="hi", tools=[{"type": "web_serch"}])
    assert error.param == "tools[0].type" and error.code == "unsupported_tool_type" and "'web_serch'" in message(error)


def test_a_tool_type_nobody_defines_is_a_400_naming_it(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    error = refusal(client, upstream, model="fake-model", input="hi", tools=[FUNCTION, {"type": "telepathy"}])
    assert error.param == "tools[1].type" and error.code == "unsupported_tool_type"
