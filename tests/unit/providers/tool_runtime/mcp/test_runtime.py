"""The mcp runtime's checks of a request's tools, what a response may show of them, and which
calls an approval releases."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from builder.errors import ConfigError
from builder.load import parse_config
from builder.resolve import resolve
from providers.tool_runtime.mcp.config import McpConfig
from providers.tool_runtime.mcp.runtime import McpRuntime
from providers.tool_runtime.mcp.session import pending_approvals
from contract.tool_runtime.protocol import ModelCall, ToolContext
from contract.errors import InvalidRequestError

PUBLIC = "https://93.184.216.34/mcp"


def runtime(**config: Any) -> McpRuntime:
    transport = httpx2.MockTransport(lambda request: httpx2.Response(500))  # never reached by these tests
    return McpRuntime(McpConfig.model_validate(config), lambda trusted: transport)


async def test_a_good_tool_passes() -> None:
    await runtime().check_tool({"type": "mcp", "server_label": "s", "server_url": PUBLIC, "allowed_tools": {"read_only": True},
                                "require_approval": {"never": {"tool_names": ["a"]}}, "headers": {"X": "y"}, "authorization": "t"}, "tools[0]")


@pytest.mark.parametrize(("tool", "param"), [
    ({}, "tools[0].server_label"),
    ({"server_label": "s", "tunnel_id": "t"}, "tools[0].tunnel_id"),
    ({"server_label": "s", "server_url": PUBLIC, "headers": {"X": 1}}, "tools[0].headers"),
    ({"server_label": "s", "server_url": PUBLIC, "authorization": 5}, "tools[0].authorization"),
    ({"server_label": "s", "server_url": PUBLIC, "allowed_tools": [1]}, "tools[0].allowed_tools"),
    ({"server_label": "s", "server_url": PUBLIC, "allowed_tools": {"tool_names": "a"}}, "tools[0].allowed_tools.tool_names"),
    ({"server_label": "s", "server_url": PUBLIC, "require_approval": {"always": ["a"]}}, "tools[0].require_approval.always"),
    ({"server_label": "s", "server_url": "http://127.0.0.1/mcp"}, "tools[0].server_url"),
    ({"server_label": "s", "connector_id": "connector_gmail"}, "tools[0].connector_id"),
    ({"server_label": "unknown"}, "tools[0].server_url"),
])
async def test_bad_tools_are_400s_naming_the_field(tool: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        await runtime().check_tool({"type": "mcp", **tool}, "tools[0]")
    assert error.value.param == param


async def test_an_operator_can_keep_requests_to_its_own_servers() -> None:
    locked = runtime(allow_request_urls=False, servers=[{"server_label": "docs", "server_url": "http://10.0.0.5/mcp"}])
    with pytest.raises(InvalidRequestError, match="configured servers by server_label \\(docs\\)"):
        await locked.check_tool({"type": "mcp", "server_label": "s", "server_url": PUBLIC}, "tools[0]")
    await locked.check_tool({"type": "mcp", "server_label": "docs"}, "tools[0]")  # private, but configured: trusted


def test_a_response_shows_neither_credentials_nor_the_urls_path() -> None:
    public = runtime().public_tool({"type": "mcp", "server_label": "s", "server_url": "https://user:pw@mcp.example.com:8443/k/SECRET?key=1",
                                    "authorization": "tok", "headers": {"X-Key": "v"}, "require_approval": "never"})
    assert public.tool == {"type": "mcp", "server_label": "s", "server_url": "https://mcp.example.com:8443", "require_approval": "never"}
    assert public.secrets_removed
    assert not runtime().public_tool({"type": "mcp", "server_label": "s", "server_url": "https://mcp.example.com"}).secrets_removed


def test_an_approval_in_the_input_releases_the_call_it_answers() -> None:
    request = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "docs", "name": "delete", "arguments": '{"id": 1}'}
    approve = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    servers: Any = {"wiki": object(), "docs": object()}
    [call] = pending_approvals(servers, ToolContext("resp_1", [request], [approve]))
    assert call == ModelCall("1:delete", '{"id": 1}', "mcpr_1", approval_request_id="mcpr_1")
    # Already run (the chain holds its call), declined, or given earlier in the history: nothing to run.
    ran = {"type": "mcp_call", "approval_request_id": "mcpr_1"}
    assert pending_approvals(servers, ToolContext("r", [request, ran], [approve])) == []
    assert pending_approvals(servers, ToolContext("r", [request], [{**approve, "approve": False}])) == []
    assert pending_approvals(servers, ToolContext("r", [request, approve], [])) == []


def test_an_approval_of_an_unknown_request_or_server_is_a_400() -> None:
    approve = {"type": "mcp_approval_response", "approval_request_id": "mcpr_9", "approve": True}
    with pytest.raises(InvalidRequestError) as error:
        pending_approvals({}, ToolContext("r", [], [{"role": "user"}, approve]))
    assert error.value.param == "input[1].approval_request_id"
    request = {"type": "mcp_approval_request", "id": "mcpr_9", "server_label": "gone", "name": "x", "arguments": "{}"}
    with pytest.raises(InvalidRequestError, match="'gone', which is not in 'tools'"):
        pending_approvals({"docs": object()}, ToolContext("r", [request], [approve]))  # type: ignore[dict-item]


async def _asks_approval(mcp: McpRuntime, tool: dict[str, Any]) -> bool:
    """Whether a call of the tool `roll` of this request's one MCP server waits for an approval."""
    session = await mcp.open_session([{"type": "mcp", "server_label": "dice", **tool}], ToolContext("resp_1", [], []))
    return session.approval_item(ModelCall("0:roll", "{}", "call_1")) is not None


@pytest.mark.parametrize(("default", "tool", "asks"), [
    (None, {}, True),  # OpenAI's default: always
    ("always", {}, True),
    ("never", {}, False),  # OGX's default, for the clients of a deployment that migrates from it
    ("never", {"require_approval": None}, False),
    ("never", {"require_approval": "always"}, True),  # the request's own policy wins
    ("never", {"require_approval": {"always": {"tool_names": ["roll"]}}}, True),
    ("always", {"require_approval": "never"}, False),
])
async def test_a_request_urls_approval_policy_defaults_to_the_operators_setting(default: str | None, tool: dict[str, Any],
                                                                                 asks: bool) -> None:
    mcp = runtime(**({"default_require_approval": default} if default else {}))
    assert await _asks_approval(mcp, {"server_url": PUBLIC, **tool}) is asks


@pytest.mark.parametrize(("configured", "asks"), [({}, True), ({"require_approval": "never"}, False)])
async def test_a_configured_server_keeps_its_own_approval_policy(configured: dict[str, Any], asks: bool) -> None:
    mcp = runtime(default_require_approval="never", servers=[{"server_label": "dice", "server_url": "http://10.0.0.5/mcp", **configured}])
    assert await _asks_approval(mcp, {}) is asks


def test_the_default_approval_policy_is_always_or_never_and_a_bad_one_names_its_yaml_path() -> None:
    assert McpConfig().default_require_approval == "always"
    document = {"version": 1, "name": "x", "providers": {"tool_runtime": [
        {"provider_id": "mcp", "provider_type": "mcp", "config": {"default_require_approval": "sometimes"}}]}}
    with pytest.raises(ConfigError) as refused:
        resolve(parse_config(document, {}), {})
    assert str(refused.value) == ("providers.tool_runtime[0].config.default_require_approval: Input should be 'always' or 'never' "
                                  "(got 'sometimes')")
