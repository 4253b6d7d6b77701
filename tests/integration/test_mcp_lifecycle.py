"""Tool turns through background runs, cancels, disconnects and restarts, against the live fake
upstream and the live MCP servers (timing matters here, so nothing is replayed)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import openai

from fake_mcp.servers import McpServers
from fake_upstream.server import FakeUpstream
from runtime.library_client import LibraryClient
from support.live import CONFIG, live_env, wait_for


def mcp(url: str, **extra: Any) -> Any:
    return {"type": "mcp", "server_label": "demo", "server_url": url, "require_approval": "never", **extra}


def test_a_background_response_runs_its_tools_and_logs_their_events(client: openai.OpenAI, mcp_servers: McpServers) -> None:
    queued = client.responses.create(model="fake-model", input='[tool:sleep {"seconds": 0.3}]', tools=[mcp(mcp_servers.open)],
                                     background=True)
    assert queued.status == "queued" and [tool.server_url for tool in queued.tools] == [mcp_servers.open.removesuffix("/mcp")]  # type: ignore[union-attr]
    events = list(client.responses.retrieve(queued.id, stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert ["response.mcp_list_tools.completed", "response.mcp_call.completed"] == [k for k in kinds if k.endswith(".completed")][:2]
    done = client.responses.retrieve(queued.id)
    assert [item.type for item in done.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert done.output_text == "Tool result: slept 0.3"


def test_a_background_response_that_cannot_list_its_tools_fails_naming_the_server(client: openai.OpenAI, mcp_servers: McpServers) -> None:
    queued = client.responses.create(model="fake-model", input="hi", tools=[mcp(mcp_servers.unreachable)], background=True)
    wait_for(lambda: client.responses.retrieve(queued.id).status == "failed")
    failed = client.responses.retrieve(queued.id)
    assert failed.error is not None and "Error retrieving tool list from MCP server: 'demo'" in failed.error.message
    [listing] = failed.output
    assert listing.type == "mcp_list_tools" and listing.error  # type: ignore[union-attr]
    kinds = [event.type for event in client.responses.retrieve(queued.id, stream=True)]
    assert kinds[-4:] == ["response.mcp_list_tools.in_progress", "response.mcp_list_tools.failed", "response.output_item.done",
                          "response.failed"]


def test_cancelling_a_background_response_stops_its_running_call(client: openai.OpenAI, mcp_servers: McpServers) -> None:
    queued = client.responses.create(model="fake-model", input="[tool:hang]", tools=[mcp(mcp_servers.open)], background=True)
    # The call is under way once its in_progress event is in the response's log.
    for event in client.responses.retrieve(queued.id, stream=True):
        if event.type == "response.output_item.added" and event.item.type == "mcp_call":
            break
    started = time.monotonic()
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and time.monotonic() - started < 2.5  # not the 3 s call timeout
    wait_for(lambda: client.responses.retrieve(queued.id).output[-1].status == "incomplete")  # type: ignore[union-attr]
    stored = client.responses.retrieve(queued.id)
    assert stored.status == "cancelled" and [item.type for item in stored.output] == ["mcp_list_tools", "mcp_call"]


def test_a_client_leaving_mid_call_cancels_the_response_and_keeps_its_items(client: openai.OpenAI, mcp_servers: McpServers) -> None:
    stream = client.responses.create(model="fake-model", input="[tool:hang]", tools=[mcp(mcp_servers.open)], stream=True)
    response_id = ""
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.mcp_call.in_progress":
            break
    stream.close()
    wait_for(lambda: client.responses.retrieve(response_id).status != "in_progress")
    stored = client.responses.retrieve(response_id)
    assert stored.status == "cancelled"
    listing, call = stored.output
    assert listing.type == "mcp_list_tools" and call.type == "mcp_call" and call.status == "incomplete"


def test_a_chain_of_tool_turns_gives_the_model_the_same_context_after_a_restart(upstream: FakeUpstream, tmp_path: Path,
                                                                                mcp_servers: McpServers) -> None:
    """The second turn's context comes from memory while the process lives and from the store
    after a restart: the upstream is given the same messages, tool calls and results included."""
    env = live_env(upstream, tmp_path)
    tools = [mcp(mcp_servers.open)]
    with LibraryClient(CONFIG, env=env) as stack:
        client = stack.openai(max_retries=0)
        first = client.responses.create(model="fake-model", input='[tool:echo {"text": "one"}] [tool:weather {"city": "Rome"}]', tools=tools)
        assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
        in_memory = client.responses.create(model="fake-model", input="and then?", previous_response_id=first.id, tools=tools)
    with LibraryClient(CONFIG, env=env) as stack:
        client = stack.openai(max_retries=0)
        from_store = client.responses.create(model="fake-model", input="and then?", previous_response_id=first.id, tools=tools)
        retrieved = client.responses.retrieve(first.id)
    assert [item.model_dump() for item in retrieved.output] == [item.model_dump() for item in first.output]
    assert in_memory.output_text == from_store.output_text
    before, after = upstream.bodies()[-2:]
    assert before["messages"] == after["messages"] and before["tools"] == after["tools"]
    calls = [message for message in after["messages"] if message.get("tool_calls")]
    results = [message["content"] for message in after["messages"] if message["role"] == "tool"]
    assert [call["tool_calls"][0]["function"]["name"] for call in calls] == ["echo", "weather"]
    assert results[0] == "echo: one" and json.loads(results[1]) == {"city": "Rome", "temp_c": 21.5}
    assert not any(item.type == "mcp_list_tools" for item in from_store.output)  # the chain's listing is reused


def test_a_servers_description_tells_the_model_where_its_tools_lead(upstream: FakeUpstream, tmp_path: Path,
                                                                    mcp_servers: McpServers) -> None:
    with LibraryClient(CONFIG, env=live_env(upstream, tmp_path)) as stack:
        stack.openai(max_retries=0).responses.create(model="fake-model", input="hi", tools=[
            mcp(mcp_servers.open, allowed_tools=["echo"], server_description="The team's test server")])
    [tool] = upstream.bodies()[-1]["tools"]
    assert tool["function"]["description"] == "Echo the text back.\n\n(A tool of the MCP server 'demo': The team's test server)"


def test_images_a_tool_returns_are_given_to_the_model(upstream: FakeUpstream, tmp_path: Path, mcp_servers: McpServers) -> None:
    with LibraryClient(CONFIG, env=live_env(upstream, tmp_path)) as stack:
        stack.openai(max_retries=0).responses.create(model="fake-model", input="[tool:picture]", tools=[mcp(mcp_servers.open)])
    messages = upstream.bodies()[-1]["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2]["content"] == "[image: image/png]"
    image = messages[3]["content"][1]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")


def test_a_queued_response_whose_tools_had_secrets_is_failed_not_resumed_elsewhere(upstream: FakeUpstream, tmp_path: Path,
                                                                                 mcp_servers: McpServers) -> None:
    """The stored request of a background response never holds its MCP credentials: if the
    process that had them dies before running it, the next one fails it, saying why."""
    from builder.config import SqliteBackend
    from providers.responses.background import SECRETS_REMOVED
    from providers.responses.store import ResponseStore
    from contract.items import normalize_input
    from contract.responses.models import CreateResponse, response_object
    from runtime.storage import Sql, open_database

    request = CreateResponse(model="fake-model", input="hi", background=True, tools=[mcp(mcp_servers.private, authorization="t")])
    stored_request = {**request.model_dump(mode="json"), "tools": [mcp(mcp_servers.private)], SECRETS_REMOVED: True}

    async def leave_queued() -> None:
        db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "integration" / "stack.db"))
        store = ResponseStore(db)
        await store.create_tables()
        await store.insert(response_object(request, "resp_with_secrets", "queued"), ancestors=[],
                           input_items=normalize_input(request.input), request=stored_request)
        await db.write_one(Sql("UPDATE responses SET heartbeat_at = 0.0"))
        await db.close()

    asyncio.run(leave_queued())
    with LibraryClient(CONFIG, env=live_env(upstream, tmp_path, STACK_TEST_LEASE_S="2")) as stack:
        client = stack.openai(max_retries=0)
        wait_for(lambda: client.responses.retrieve("resp_with_secrets").status == "failed")
        error = client.responses.retrieve("resp_with_secrets").error
        assert error is not None and "credentials of its tools" in error.message
