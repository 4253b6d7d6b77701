"""MCP traffic goes through the stack's HTTP transport seam, so it is recorded and replayed like
model traffic: a session recorded once answers again with the MCP server gone."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from builder.load import parse_config
from builder.resolve import StackPlan, resolve
from fake_mcp.servers import McpServers, running_mcp_servers
from fake_upstream.server import running_fake_upstream
from runtime.library_client import LibraryClient

REPO = Path(__file__).resolve().parents[2]


def plan(mode: str | None, recordings: Path, inference_url: str, state: Path) -> StackPlan:
    env = dict(os.environ, STACK_STATE_DIR=str(state))
    recording: dict[str, Any] = {"directory": str(recordings)}
    if mode is not None:
        recording["mode"] = mode
    document = {
        "version": 1, "name": "mcp-replay", "recording": recording,
        "providers": {
            "inference": [{"provider_id": "fake", "provider_type": "openai", "config": {"base_url": inference_url, "api_key": "k"}}],
            "responses": [{"provider_id": "builtin", "provider_type": "builtin"}],
            "tool_runtime": [{"provider_id": "mcp", "provider_type": "mcp", "config": {"allow_private": ["127.0.0.1"]}}],
        },
    }
    return resolve(parse_config(document, env), env)


def ask(stack: LibraryClient, url: str) -> dict[str, Any]:
    tool = {"type": "mcp", "server_label": "replayed", "server_url": url, "require_approval": "never"}
    response = stack.openai(max_retries=0).responses.create(model="fake-model", input='[tool:weather {"city": "Lima"}]', tools=[tool])
    return response.model_dump()


def shape(response: dict[str, Any]) -> list[Any]:
    """The output without its random ids."""
    return [{key: value for key, value in item.items() if key != "id"} for item in response["output"]]


def test_an_mcp_session_recorded_once_replays_without_the_server(tmp_path: Path) -> None:
    recordings = tmp_path / "recordings"
    with running_fake_upstream() as upstream, running_mcp_servers() as servers:
        url = servers.open
        with LibraryClient(plan("record", recordings, upstream.base_url, tmp_path / "a")) as stack:
            recorded = ask(stack, url)
    assert [item["type"] for item in recorded["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    mcp_files = sorted(path.name for path in recordings.glob("mcp-*.json"))
    methods = [json.loads((recordings / name).read_text())["request"]["body"]["method"] for name in mcp_files]
    assert sorted(methods) == ["server/discover", "tools/call", "tools/list"]
    # The upstream and the MCP server are gone: every answer comes from the recordings.
    with LibraryClient(plan("replay", recordings, "http://127.0.0.1:9/v1", tmp_path / "b")) as stack:
        replayed = ask(stack, url)
    assert shape(replayed) == shape(recorded)
    assert replayed["output"][2]["content"][0]["text"] == "Tool result: " + recorded["output"][1]["output"]


def test_an_mcp_session_from_the_repositorys_recordings(tmp_path: Path, mcp_servers: McpServers) -> None:
    """The suite's mode (replay by default) for both the model and the MCP server: replayed from
    recordings/ like any model answer (recorded with --inference-mode record-if-missing)."""
    inference = os.environ.get("STACK_TEST_INFERENCE_URL") or "http://127.0.0.1:9/v1"
    with LibraryClient(plan(None, REPO / "recordings", inference, tmp_path)) as stack:
        response = ask(stack, mcp_servers.open)
    listing, call, message = response["output"]
    assert "weather" in [tool["name"] for tool in listing["tools"]]
    assert json.loads(call["output"]) == {"city": "Lima", "temp_c": 21.5}
    assert message["content"][0]["text"] == f"Tool result: {call['output']}"
