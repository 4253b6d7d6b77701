"""A request's tools as the model sees them: names, and what each turn offers and forces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from providers.responses.tools import RequestTools
from contract.responses.models import CreateResponse
from contract.tool_runtime.protocol import FunctionSpec, ModelCall
from contract.errors import InvalidRequestError


class Session:
    def __init__(self, *specs: FunctionSpec) -> None:
        self.specs = specs

    def preparations(self) -> Sequence[Any]:
        return []

    def functions(self) -> Sequence[FunctionSpec]:
        return self.specs

    def pending_calls(self) -> Sequence[ModelCall]:
        return []

    def approval_item(self, call: ModelCall) -> None:
        return None

    async def run(self, call: ModelCall, sink: Any) -> None:
        pass

    def citations(self) -> None:
        return None

    async def aclose(self) -> None:
        pass


DOCS = Session(FunctionSpec("search", {"type": "object"}, "Search the docs", group="docs", key="0:search"),
               FunctionSpec("read", {"type": "object"}, group="docs", key="0:read"))
WIKI = Session(FunctionSpec("search", {"type": "object"}, group="wiki", key="0:search"))


def tools(tool_choice: Any = None, **extra: Any) -> RequestTools:
    request = CreateResponse(model="m", input="x", tool_choice=tool_choice, tools=[
        {"type": "function", "name": "read", "parameters": {"type": "object"}},
        {"type": "mcp", "server_label": "docs"}, {"type": "mcp", "server_label": "wiki"},
    ], **extra)
    made = RequestTools(request, [(DOCS, frozenset({"mcp"})), (WIKI, frozenset({"mcp"}))])  # type: ignore[list-item]
    made.offer()
    return made


def names(offered: list[dict[str, Any]]) -> list[str]:
    return [tool["function"]["name"] for tool in offered]


def test_names_taken_by_a_client_function_or_another_tool_get_their_groups_prefix() -> None:
    made = tools()
    offered, choice = made.chat_tools(first_turn=True, server_calls_left=True)
    assert names(offered) == ["read", "search", "docs__read", "wiki__search"] and choice is None
    assert offered[1]["function"]["description"] == "Search the docs"
    assert made.is_server("wiki__search") and not made.is_server("read")
    session, call = made.server_call("docs__read", '{"a": 1}', "call_9")
    assert session is DOCS and call == ModelCall("0:read", '{"a": 1}', "call_9")


def test_required_forces_the_first_turn_only() -> None:
    made = tools("required")
    assert made.chat_tools(first_turn=True, server_calls_left=True)[1] == "required"
    assert made.chat_tools(first_turn=False, server_calls_left=True)[1] == "auto"


def test_a_choice_of_one_mcp_tool_forces_it_then_frees_the_model() -> None:
    made = tools({"type": "mcp", "server_label": "wiki", "name": "search"})
    offered, choice = made.chat_tools(first_turn=True, server_calls_left=True)
    assert names(offered) == ["wiki__search"] and choice == {"type": "function", "function": {"name": "wiki__search"}}
    later, free = made.chat_tools(first_turn=False, server_calls_left=True)
    assert names(later) == ["read", "search", "docs__read", "wiki__search"] and free == "auto"


def test_a_choice_of_a_server_requires_one_of_its_tools() -> None:
    offered, choice = tools({"type": "mcp", "server_label": "docs"}).chat_tools(first_turn=True, server_calls_left=True)
    assert names(offered) == ["search", "docs__read"] and choice == "required"


def test_allowed_tools_mixes_functions_and_servers() -> None:
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "read"}, {"type": "mcp", "server_label": "wiki"}]}
    made = tools(choice)
    offered, forced = made.chat_tools(first_turn=True, server_calls_left=True)
    assert names(offered) == ["read", "wiki__search"] and forced == "required"
    assert made.chat_tools(first_turn=False, server_calls_left=True)[1] == "auto"


def test_none_offers_nothing_and_no_calls_left_offers_only_client_functions() -> None:
    assert tools("none").chat_tools(first_turn=True, server_calls_left=True) == ([], None)
    assert names(tools().chat_tools(first_turn=True, server_calls_left=False)[0]) == ["read"]


def test_a_choice_naming_a_tool_not_in_tools_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as error:
        tools({"type": "mcp", "server_label": "nowhere"})
    assert error.value.param == "tool_choice" and "server_label='nowhere'" in error.value.message
