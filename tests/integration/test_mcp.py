"""The `mcp` tool through the openai SDK, in server and library modes: the model's answers are
replayed, the MCP servers are real (tests/fake_mcp) and reached live."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from fake_mcp.servers import TOKEN, McpServers

EVENTS_OF_A_CALL = [
    "response.created", "response.in_progress",
    "response.output_item.added", "response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed", "response.output_item.done",
    "response.output_item.added", "response.mcp_call.in_progress", "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
    "response.mcp_call.completed", "response.output_item.done",
    "response.output_item.added", "response.content_part.added",
]


def mcp(url: str, label: str = "demo", **extra: Any) -> Any:
    return {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never", **extra}


def test_a_call_lists_the_tools_runs_the_call_and_answers(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    response = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "hi"}]', tools=[mcp(mcp_servers.open)])
    listing, call, message = response.output
    assert listing.type == "mcp_list_tools" and listing.server_label == "demo" and listing.error is None
    echo = next(tool for tool in listing.tools if tool.name == "echo")
    assert echo.input_schema["properties"]["text"]["type"] == "string"  # type: ignore[index]
    assert echo.description == "Echo the text back." and echo.annotations == {"readOnlyHint": True}
    assert call.type == "mcp_call" and (call.name, call.server_label, call.status) == ("echo", "demo", "completed")
    assert json.loads(call.arguments) == {"text": "hi"} and call.output == "echo: hi" and call.error is None
    assert message.type == "message" and response.output_text == "Tool result: echo: hi"
    assert response.status == "completed"
    assert openai_client.responses.retrieve(response.id).model_dump() == response.model_dump()


def test_a_streamed_call_emits_openais_events_in_order(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    events = list(openai_client.responses.create(model=text_model, input='[tool:echo {"text": "hi"}]', tools=[mcp(mcp_servers.open)],
                                                 stream=True))
    kinds = [event.type for event in events]
    assert kinds[:len(EVENTS_OF_A_CALL)] == EVENTS_OF_A_CALL and kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[0].response.output == []  # items are announced by their own events
    call_events = [event for event in events if event.type.startswith("response.mcp_call")]
    added = events[6]
    assert all(event.item_id == added.item.id and event.output_index == 1 for event in call_events)
    assert added.item.status == "in_progress" and added.item.arguments == ""
    done = events[11]
    assert done.item.output == "echo: hi" and done.item.status == "completed"
    assert next(event for event in events if event.type == "response.mcp_call_arguments.done").arguments == '{"text": "hi"}'
    final = events[-1].response
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert openai_client.responses.retrieve(final.id).output_text == "Tool result: echo: hi"


def test_the_sdk_stream_helper_accumulates_the_tool_items(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    with openai_client.responses.stream(model=text_model, input='[tool:echo {"text": "hi"}]', tools=[mcp(mcp_servers.open)]) as stream:
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output_text == "Tool result: echo: hi"


def test_secrets_are_used_but_never_echoed_nor_stored(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    tool = mcp(mcp_servers.private, authorization=TOKEN, headers={"X-Trace": "secret-header"})
    response = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "in"}]', tools=[tool])
    assert response.output[1].output == "echo: in"  # type: ignore[union-attr]
    for shown in (response, openai_client.responses.retrieve(response.id)):
        [echoed] = shown.model_dump()["tools"]
        assert echoed.get("authorization") is None and echoed.get("headers") is None
        assert echoed["server_url"] == mcp_servers.private.removesuffix("/mcp")  # the path may hold credentials too
        assert TOKEN not in json.dumps(shown.model_dump())


def test_a_bearer_token_in_headers_works_too(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    tool = mcp(mcp_servers.private, headers={"Authorization": f"Bearer {TOKEN}"})
    response = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "in"}]', tools=[tool])
    assert response.output[1].output == "echo: in"  # type: ignore[union-attr]


def test_a_server_that_refuses_the_credentials_is_a_424_naming_it(openai_client: openai.OpenAI, text_model: str,
                                                                 mcp_servers: McpServers) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.responses.create(model=text_model, input="hi", tools=[mcp(mcp_servers.private, "locked", authorization="wrong")])
    assert error.value.status_code == 424
    assert error.value.body["message"] == "Error retrieving tool list from MCP server: 'locked'. Http status code: 401 (Unauthorized)"  # type: ignore[index]
    assert error.value.body["type"] == "external_connector_error" and error.value.body["param"] == "tools"  # type: ignore[index]


def test_the_sse_transport_is_used_for_sse_urls(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    response = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "over sse"}]', tools=[mcp(mcp_servers.sse)])
    assert response.output[1].output == "echo: over sse"  # type: ignore[union-attr]


def test_a_server_that_speaks_only_sse_is_found_at_any_url(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    # Its URL does not end in /sse: Streamable HTTP is tried first, refused (405), then SSE.
    response = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "over sse"}]', tools=[mcp(mcp_servers.events)])
    assert response.output[1].output == "echo: over sse"  # type: ignore[union-attr]


def test_an_approval_is_asked_then_given_across_a_chain(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    tool = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open}  # approval is required by default
    first = openai_client.responses.create(model=text_model, input='[tool:weather {"city": "Oslo"}]', tools=[tool])
    listing, request = first.output
    assert listing.type == "mcp_list_tools" and request.type == "mcp_approval_request"
    assert (request.name, request.server_label, json.loads(request.arguments)) == ("weather", "demo", {"city": "Oslo"})
    assert first.status == "completed" and first.output_text == ""

    second = openai_client.responses.create(
        model=text_model, previous_response_id=first.id, tools=[tool],
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    call, message = second.output  # the chain's listing is reused, not listed again
    assert call.type == "mcp_call" and call.approval_request_id == request.id and call.status == "completed"
    assert json.loads(call.output or "") == {"city": "Oslo", "temp_c": 21.5}
    assert message.type == "message" and second.output_text == f"Tool result: {call.output}"
    [approval] = openai_client.responses.input_items.list(second.id).data
    assert approval.type == "mcp_approval_response" and approval.approve is True  # type: ignore[union-attr]


def test_a_streamed_approval_request_is_one_item(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    tool = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open}
    events = list(openai_client.responses.create(model=text_model, input='[tool:weather {"city": "Oslo"}]', tools=[tool], stream=True))
    kinds = [event.type for event in events]
    assert kinds[-3:] == ["response.output_item.added", "response.output_item.done", "response.completed"]
    assert events[-3].item.type == events[-2].item.type == "mcp_approval_request"
    assert not any(kind.startswith("response.mcp_call") for kind in kinds)


def test_a_declined_call_is_not_run_and_the_model_is_told(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    tool = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open, "require_approval": "always"}
    first = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "no"}]', tools=[tool])
    request = first.output[-1]
    second = openai_client.responses.create(
        model=text_model, previous_response_id=first.id, tools=[tool],
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False, "reason": "not now"}],
    )
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text == "Tool result: The user declined to run this tool call. not now"


def test_an_approval_is_given_across_a_conversation(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    tool = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open, "require_approval": {"always": {"tool_names": ["echo"]}}}
    conversation = openai_client.conversations.create()
    first = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "conv"}]', tools=[tool], conversation=conversation.id)
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    second = openai_client.responses.create(
        model=text_model, conversation=conversation.id, tools=[tool],
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    assert [item.type for item in second.output] == ["mcp_call", "message"] and second.output_text == "Tool result: echo: conv"
    kinds = [item.type for item in openai_client.conversations.items.list(conversation.id, order="asc")]
    assert kinds == ["message", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response", "mcp_call", "message"]


def test_an_approval_for_an_unknown_request_is_a_400(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.responses.create(model=text_model, tools=[mcp(mcp_servers.open)],
                                       input=[{"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}])
    assert error.value.param == "input[0].approval_request_id"


def test_allowed_tools_limit_what_is_listed_and_offered(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    by_name = openai_client.responses.create(model=text_model, input="hi", tools=[mcp(mcp_servers.open, allowed_tools=["weather", "fail"])])
    assert [tool.name for tool in by_name.output[0].tools] == ["weather", "fail"]  # type: ignore[union-attr]
    read_only = openai_client.responses.create(model=text_model, input="hi", tools=[mcp(mcp_servers.open, allowed_tools={"read_only": True})])
    assert [tool.name for tool in read_only.output[0].tools] == ["echo"]  # type: ignore[union-attr]


def test_calls_of_one_turn_run_at_once_and_come_out_in_the_models_order(openai_client: openai.OpenAI, text_model: str,
                                                                        mcp_servers: McpServers) -> None:
    # `meet` answers "met 2" only when both calls are running at the same time.
    response = openai_client.responses.create(model=text_model, tools=[mcp(mcp_servers.open)],
                                              input='[tool:meet {"name": "ada"}] [tool:meet {"name": "bob"}]')
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [(call.output, call.status) for call in calls] == [("ada met 2", "completed"), ("bob met 2", "completed")]


def test_max_tool_calls_leaves_further_calls_unrun(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    response = openai_client.responses.create(
        model=text_model, tools=[mcp(mcp_servers.open)], max_tool_calls=2,
        input='[tool:echo {"text": "1"}] [tool:echo {"text": "2"}] [tool:echo {"text": "3"}]')
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    assert response.max_tool_calls == 2 and response.status == "completed"


def test_a_model_that_keeps_making_the_same_call_runs_it_once_and_answers(openai_client: openai.OpenAI, text_model: str,
                                                                         mcp_servers: McpServers) -> None:
    """It ended at the iteration limit, the call run on every turn: the repeat is not run again, the
    model reads that its result is above and is called with no server-side tool, and answers (the
    iteration limit itself: tests/unit/providers/responses/test_loop.py)."""
    response = openai_client.responses.create(model=text_model, tools=[mcp(mcp_servers.open)], input='[again] [tool:echo {"text": "more"}]')
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "message"]


def test_a_failing_tool_fails_its_item_not_the_response(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    events = list(openai_client.responses.create(model=text_model, tools=[mcp(mcp_servers.open)], stream=True,
                                                 input='[tool:fail {"reason": "disk full"}]'))
    assert "response.mcp_call.failed" in [event.type for event in events]
    final = events[-1].response
    call = final.output[1]
    assert call.type == "mcp_call" and call.status == "failed" and call.output is None
    assert call.error is not None and call.error.type == "mcp_tool_execution_error"
    assert "disk full" in json.dumps(call.error.content)  # type: ignore[union-attr]
    assert final.status == "completed" and final.output_text == "Tool result: Error: Error executing tool fail: disk full"


def test_a_tool_that_hangs_fails_its_item_after_the_timeout(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    response = openai_client.responses.create(model=text_model, tools=[mcp(mcp_servers.open)], input="[tool:hang]")
    call = response.output[1]
    assert call.type == "mcp_call" and call.status == "failed"
    assert call.error is not None and call.error.type == "mcp_protocol_error" and call.error.code == -32001  # type: ignore[union-attr]
    assert response.status == "completed" and response.output_text.startswith("Tool result: Error: ")


@pytest.mark.parametrize("which", ["unreachable", "hanging"])
def test_a_server_that_cannot_be_used_is_a_424_naming_it(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers,
                                                        which: str) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.responses.create(model=text_model, input="hi", tools=[mcp(getattr(mcp_servers, which), "gone")], stream=which == "hanging")
    assert error.value.status_code == 424
    assert error.value.body["message"].startswith("Error retrieving tool list from MCP server: 'gone'. ")  # type: ignore[index]


def test_tool_results_with_images_and_resources_reach_the_model(openai_client: openai.OpenAI, text_model: str,
                                                                mcp_servers: McpServers) -> None:
    response = openai_client.responses.create(model=text_model, tools=[mcp(mcp_servers.open)], input="[tool:picture] [tool:notes]")
    picture, notes = (item.model_dump() for item in response.output[1:3])
    assert picture["output"] == "[image: image/png]"
    assert picture["content"][0]["type"] == "input_image" and picture["content"][0]["image_url"].startswith("data:image/png;base64,")
    assert notes["output"] == "Meeting notes:\nShip on Friday.\n[resource: agenda <file:///agenda.txt>]"


def test_a_configured_server_is_used_by_its_label_or_connector(openai_client: openai.OpenAI, text_model: str) -> None:
    by_label = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "c"}]',
                                              tools=[{"type": "mcp", "server_label": "configured"}])
    # Its run.yaml entry: no approval needed, only echo and weather allowed.
    assert [tool.name for tool in by_label.output[0].tools] == ["echo", "weather"]  # type: ignore[union-attr]
    assert by_label.output[1].output == "echo: c"  # type: ignore[union-attr]
    by_connector = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "c"}]',
                                                  tools=[{"type": "mcp", "server_label": "drive", "connector_id": "connector_stack_test"}])
    assert by_connector.output[1].output == "echo: c"  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.responses.create(model=text_model, input="hi", tools=[{"type": "mcp", "server_label": "nowhere"}])
    assert error.value.param == "tools[0].server_url"


def test_private_addresses_not_allowed_by_run_yaml_are_refused(openai_client: openai.OpenAI, text_model: str) -> None:
    for url in ("http://10.20.30.40/mcp", "http://169.254.169.254/latest/meta-data", "http://[::1]:9/mcp"):
        with pytest.raises(openai.BadRequestError) as error:
            openai_client.responses.create(model=text_model, input="hi", tools=[mcp(url)])
        assert error.value.param == "tools[0].server_url" and "private or reserved" in error.value.message


@pytest.mark.parametrize(("tool", "param"), [
    ({"type": "mcp", "server_url": "http://x"}, "tools[0].server_label"),
    ({"type": "mcp", "server_label": "x", "server_url": "ftp://x/mcp"}, "tools[0].server_url"),
    ({"type": "mcp", "server_label": "x", "server_url": "http://x", "require_approval": "sometimes"}, "tools[0].require_approval"),
    ({"type": "mcp", "server_label": "x", "server_url": "http://x", "allowed_tools": {"names": ["a"]}}, "tools[0].allowed_tools"),
    ({"type": "image_generation"}, "tools[0].type"),  # a hosted tool no runtime here serves
])
def test_malformed_tools_are_400s_naming_the_field(openai_client: openai.OpenAI, text_model: str, tool: Any, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.responses.create(model=text_model, input="hi", tools=[tool])
    assert error.value.param == param


def test_store_false_runs_tools_and_keeps_nothing(openai_client: openai.OpenAI, text_model: str, mcp_servers: McpServers) -> None:
    response = openai_client.responses.create(model=text_model, input='[tool:echo {"text": "x"}]', tools=[mcp(mcp_servers.open)], store=False)
    assert response.output_text == "Tool result: echo: x"
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(response.id)
