"""OpenTelemetry traces (issue 12, item 4), collected by the SDK's in-memory exporter in library
mode: the span tree of a chat completion, a streamed one, and a response that calls an MCP tool
(the suite's real MCP server) and stores its result; GenAI attributes on the model call spans."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn

from fake_mcp.servers import McpServers
from fake_upstream.server import running_fake_upstream
from runtime.library_client import LibraryClient
from runtime.testing.targets import free_port
from support.live_stack import run_yaml

TRACING = """server:
  tracing: {exporter: memory, service_name: stack-test}
"""


@pytest.fixture()
def library(tmp_path: Path) -> Iterator[LibraryClient]:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, name="tracing",
                        providers="  tool_runtime: [{provider_id: mcp, provider_type: mcp, config: {allow_private: [127.0.0.1]}}]\n")
        path.write_text(path.read_text() + TRACING)
        with LibraryClient(path, env={}) as library:
            yield library


def spans(library: LibraryClient) -> list[Any]:
    exporter = library.app.state.tracing.exporter
    found = list(exporter.get_finished_spans())
    exporter.clear()
    return found


def children(all_spans: list[Any], parent: Any) -> list[Any]:
    return [span for span in all_spans if span.parent is not None and span.parent.span_id == parent.context.span_id]


def test_a_chat_completion_is_a_server_span_with_a_model_call_span_inside(library: LibraryClient) -> None:
    client = library.openai(max_retries=0)
    spans(library)
    client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:3] hi"}])
    found = spans(library)
    (server,) = [span for span in found if span.name == "POST /v1/chat/completions"]
    assert server.attributes["http.route"] == "/v1/chat/completions" and server.attributes["http.response.status_code"] == 200
    (call,) = children(found, server)
    assert call.name == "chat fake-model" and call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.provider.name"] == "fake" and call.attributes["gen_ai.usage.output_tokens"] == 3
    assert list(call.attributes["gen_ai.response.finish_reasons"]) == ["stop"]
    assert "gen_ai.input.messages" not in call.attributes  # content only when configured
    assert server.resource.attributes["service.name"] == "stack-test"


def test_a_stream_is_one_model_call_span_to_its_last_chunk(library: LibraryClient) -> None:
    client = library.openai(max_retries=0)
    spans(library)
    list(client.chat.completions.create(model="fake-model", stream=True, messages=[{"role": "user", "content": "[tokens:4] hi"}]))
    found = spans(library)
    (server,) = [span for span in found if span.name == "POST /v1/chat/completions"]
    (call,) = children(found, server)
    assert call.attributes["gen_ai.usage.output_tokens"] == 4 and list(call.attributes["gen_ai.response.finish_reasons"]) == ["stop"]
    assert call.end_time <= server.end_time


def test_a_response_with_a_tool_call_has_model_tool_and_store_spans(library: LibraryClient, mcp_servers: McpServers) -> None:
    client = library.openai(max_retries=0)
    spans(library)
    tool = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open, "require_approval": "never"}
    response = client.responses.create(model="fake-model", input='[tool:echo {"text": "hi"}]', tools=[tool])  # type: ignore[list-item]
    assert response.status == "completed"
    found = spans(library)
    (server,) = [span for span in found if span.name == "POST /v1/responses"]
    inside = children(found, server)
    names = [span.name for span in inside]
    assert names.count("chat fake-model") == 2  # the call, then the answer from its result
    assert "execute_tool echo" in names and any(name == "db write" for name in names)
    (tool_span,) = [span for span in inside if span.name == "execute_tool echo"]
    assert tool_span.attributes["gen_ai.tool.name"] == "echo" and tool_span.attributes["gen_ai.tool.call.id"]
    assert all(span.context.trace_id == server.context.trace_id for span in inside)


def test_a_callers_traceparent_puts_the_request_in_its_trace(library: LibraryClient) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    client = library.openai(max_retries=0, default_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    spans(library)
    client.models.list()
    (server,) = [span for span in spans(library) if span.name == "GET /v1/models"]
    assert format(server.context.trace_id, "032x") == trace_id and format(server.parent.span_id, "016x") == parent_id


def test_a_request_the_sampler_leaves_out_makes_no_span_at_all(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, name="unsampled")
        path.write_text(path.read_text() + "server:\n  tracing: {exporter: memory, sample_ratio: 0}\n")
        with LibraryClient(path, env={}) as library:
            library.openai(max_retries=0).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
            assert spans(library) == []


def test_a_websocket_connection_is_a_server_span_with_its_responses_inside(library: LibraryClient) -> None:
    # The library client has no WebSocket transport: its app, served by uvicorn on the library's own loop.
    server = uvicorn.Server(uvicorn.Config(library.app, host="127.0.0.1", port=free_port(), lifespan="off", log_config=None,
                                           ws="websockets-sansio"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(), library._running_loop().loop)
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.config.port}/v1", api_key="none", max_retries=0)
    try:
        with client.responses.connect() as connection:
            for text in ("[tokens:2] one", "[tokens:1] two"):
                connection.response.create(model="fake-model", input=text)
                for event in connection:
                    if event.type == "response.completed":
                        break
    finally:
        server.should_exit = True
        serving.result(timeout=10)
    found = spans(library)
    sockets = [span for span in found if span.name == "WS /v1/responses"]
    assert len(sockets) == 1
    assert sockets[0].attributes["http.route"] == "/v1/responses" and sockets[0].attributes["http.response.status_code"] == 101
    model_calls = [span for span in children(found, sockets[0]) if span.name == "chat fake-model"]
    assert len(model_calls) == 2  # each response's model call is inside the connection's span
