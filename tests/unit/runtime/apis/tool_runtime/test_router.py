"""The tool router: which runtime serves each tool type, and who renders each item type."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from runtime.apis.tool_runtime.router import ToolRouter
from support.specimens import RecordedTools


class Config(BaseModel):
    pass


def runtime(provider_id: str, types: set[str], items: set[str] = frozenset()) -> Any:  # type: ignore[assignment]
    class Runtime(RecordedTools):
        @property
        def tool_types(self) -> frozenset[str]:
            return frozenset(types)

        @property
        def item_types(self) -> frozenset[str]:
            return frozenset(items)

    return Runtime(provider_id, Config())


def test_each_type_goes_to_the_runtime_that_serves_it() -> None:
    search, mcp = runtime("search", {"web_search", "web_search_preview"}, {"web_search_call"}), runtime("mcp", {"mcp"}, {"mcp_call"})
    router = ToolRouter({"search": search, "mcp": mcp})
    assert router.tool_types == ("mcp", "web_search", "web_search_preview")
    assert router.runtime_for("web_search_preview") is search and router.runtime_for("mcp") is mcp
    assert router.runtime_for("code_interpreter") is None
    assert set(router.renderers) == {"web_search_call", "mcp_call"}


def test_two_runtimes_serving_one_type_is_an_error_naming_both() -> None:
    with pytest.raises(ValueError, match="tool type 'web_search' is served by two tool_runtime providers, 'tavily' and 'brave'"):
        ToolRouter({"tavily": runtime("tavily", {"web_search"}), "brave": runtime("brave", {"web_search"})})
