"""MCP's items, filters and how the items read to the model, as a specification."""

from __future__ import annotations

from typing import Any

import mcp_types as T
import pytest

from providers.responses.items import chat_messages
from providers.tool_runtime.mcp.items import call_outcome, is_allowed, listed_tools, needs_approval, render, tool_entry

RENDERERS: Any = {kind: render for kind in ("mcp_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response")}
ECHO = {"name": "echo", "annotations": {"readOnlyHint": True}}
DELETE = {"name": "delete", "annotations": None}


def test_a_listed_tool_keeps_its_schema_description_and_annotations() -> None:
    tool = T.Tool(name="echo", description="Echo", input_schema={"type": "object", "properties": {"t": {"type": "string"}}},
                  annotations=T.ToolAnnotations(read_only_hint=True))
    assert tool_entry(tool) == {"name": "echo", "description": "Echo", "annotations": {"readOnlyHint": True},
                                "input_schema": {"type": "object", "properties": {"t": {"type": "string"}}}}


@pytest.mark.parametrize(("allowed", "echo", "delete"), [
    (None, True, True),
    (["echo"], True, False),
    ({"tool_names": ["delete"]}, False, True),
    ({"read_only": True}, True, False),
    ({"read_only": False}, False, True),
    ({"tool_names": ["echo"], "read_only": False}, False, False),
])
def test_allowed_tools(allowed: Any, echo: bool, delete: bool) -> None:
    assert (is_allowed(ECHO, allowed), is_allowed(DELETE, allowed)) == (echo, delete)


@pytest.mark.parametrize(("policy", "echo", "delete"), [
    (None, True, True),  # OpenAI's default: ask
    ("always", True, True),
    ("never", False, False),
    ({"never": {"tool_names": ["echo"]}}, False, True),
    ({"never": {"read_only": True}}, False, True),
    ({"always": {"tool_names": ["delete"]}}, False, True),  # only the listed ones ask
    ({"always": {"tool_names": ["delete"]}, "never": {"tool_names": ["echo"]}}, False, True),
    ({"always": {"tool_names": ["x"]}, "never": {"tool_names": ["y"]}}, True, True),  # neither: ask
])
def test_require_approval(policy: Any, echo: bool, delete: bool) -> None:
    assert (needs_approval(ECHO, policy), needs_approval(DELETE, policy)) == (echo, delete)


def test_a_result_is_text_with_images_and_pdfs_beside_it() -> None:
    result = T.CallToolResult(content=[
        T.TextContent(type="text", text="Here:"),
        T.ImageContent(type="image", data="iVBO", mime_type="image/png"),
        T.EmbeddedResource(type="resource", resource=T.TextResourceContents(uri="file:///a.txt", text="A text")),
        T.EmbeddedResource(type="resource", resource=T.BlobResourceContents(uri="file:///d/r.pdf", mime_type="application/pdf", blob="JVBE")),
        T.ResourceLink(type="resource_link", uri="https://x/y", name="y"),
        T.AudioContent(type="audio", data="UklG", mime_type="audio/wav"),
    ])
    text, attachments = call_outcome(result)
    assert text.split("\n") == ["Here:", "[image: image/png]", "A text", "[resource: file:///d/r.pdf (application/pdf)]",
                                "[resource: y <https://x/y>]", "[audio: audio/wav, not shown to the model]"]
    assert attachments == [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "auto"},
        {"type": "input_file", "filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBE"},
    ]


def test_structured_content_is_the_text_when_there_is_no_other() -> None:
    text, _ = call_outcome(T.CallToolResult(content=[], structured_content={"temp": 21}))
    assert text == '{"temp": 21}'


def test_a_call_reads_as_a_tool_call_and_its_result() -> None:
    call = {"type": "mcp_call", "id": "mcp_1", "name": "echo", "arguments": '{"t": 1}', "output": "1", "status": "completed"}
    assert chat_messages([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}, call], None, RENDERERS) == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_s1", "type": "function", "function": {"name": "echo", "arguments": '{"t": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_s1", "content": "1"},
    ]


def test_a_failed_call_gives_the_model_its_error() -> None:
    protocol = {"type": "mcp_call", "id": "m", "name": "x", "arguments": "{}", "status": "failed",
                "error": {"type": "mcp_protocol_error", "code": -32001, "message": "timed out"}}
    execution = {**protocol, "error": {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "disk full"}]}}
    assert chat_messages([protocol], None, RENDERERS)[1]["content"] == "Error: timed out"
    assert chat_messages([execution], None, RENDERERS)[1]["content"] == "Error: disk full"


def test_an_approved_call_is_one_tool_call_and_a_declined_one_says_so() -> None:
    request = {"type": "mcp_approval_request", "id": "mcpr_1", "name": "delete", "arguments": '{"id": 7}', "server_label": "s"}
    pending = chat_messages([request], None, RENDERERS)
    assert pending == []  # an unanswered request is not a call the model made (no result to pair)
    approved = [request, {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
                {"type": "mcp_call", "id": "mcp_2", "name": "delete", "arguments": '{"id": 7}', "output": "gone",
                 "approval_request_id": "mcpr_1", "status": "completed"}]
    messages = chat_messages(approved, None, RENDERERS)
    assert [m["role"] for m in messages] == ["assistant", "tool"] and messages[1]["content"] == "gone"
    declined = [request, {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False, "reason": "no"}]
    messages = chat_messages(declined, None, RENDERERS)
    assert messages[0]["tool_calls"][0]["function"] == {"name": "delete", "arguments": '{"id": 7}'}
    assert messages[1] == {"role": "tool", "tool_call_id": "call_s1", "content": "The user declined to run this tool call. no"}


def test_images_of_a_result_follow_it_as_user_content() -> None:
    call = {"type": "mcp_call", "id": "m", "name": "picture", "arguments": "{}", "output": "[image: image/png]", "status": "completed",
            "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto"}]}
    assistant, tool, user = chat_messages([call], None, RENDERERS)
    assert tool["content"] == "[image: image/png]"
    assert user == {"role": "user", "content": [{"type": "text", "text": "(Returned by picture:)"},
                                                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "auto"}}]}


def test_the_latest_good_listing_of_a_server_is_reused() -> None:
    items = [
        {"type": "mcp_list_tools", "server_label": "a", "tools": [{"name": "old"}]},
        {"type": "mcp_list_tools", "server_label": "b", "tools": [{"name": "other"}]},
        {"type": "mcp_list_tools", "server_label": "a", "tools": [{"name": "new"}]},
        {"type": "mcp_list_tools", "server_label": "a", "tools": [], "error": "down"},
    ]
    assert listed_tools(items, "a") == [{"name": "new"}] and listed_tools(items, "c") is None
