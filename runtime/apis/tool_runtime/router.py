"""The tool runtimes of a stack, looked up by the tool types they serve."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from contract.tool_runtime.protocol import ToolRuntime

if TYPE_CHECKING:
    from runtime.apis.surface import ApiContext

__all__ = ["ToolRouter", "open_tool_router"]


class ToolRouter:
    """Which runtime serves each `tools[].type`, and how each server-side item reads to the model."""

    def __init__(self, runtimes: Mapping[str, ToolRuntime]) -> None:
        by_type: dict[str, tuple[str, ToolRuntime]] = {}
        renderers: dict[str, Any] = {}
        for provider_id, runtime in runtimes.items():
            for tool_type in runtime.tool_types:
                if tool_type in by_type:
                    raise ValueError(
                        f"tool type {tool_type!r} is served by two tool_runtime providers, "
                        f"{by_type[tool_type][0]!r} and {provider_id!r}: keep one"
                    )
                by_type[tool_type] = (provider_id, runtime)
            for item_type in runtime.item_types:
                renderers[item_type] = runtime.render
        self._by_type = {tool_type: runtime for tool_type, (_, runtime) in by_type.items()}
        self.renderers: Mapping[str, Any] = renderers
        """Item type -> the `render` of the runtime that produces it."""

    @property
    def tool_types(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_type))

    def runtime_for(self, tool_type: str) -> ToolRuntime | None:
        return self._by_type.get(tool_type)


@asynccontextmanager
async def open_tool_router(context: ApiContext) -> AsyncIterator[ToolRouter]:
    yield ToolRouter(context.providers)
