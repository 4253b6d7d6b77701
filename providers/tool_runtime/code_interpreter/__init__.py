"""The `code_interpreter` tool: the model runs Python in a container's sandbox.

The model is offered one function, `python`, taking the code. Its call becomes a
`code_interpreter_call` item (`in_progress`, the code as `response.code_interpreter_call_code.*`
events, `interpreting`, `completed`) run in a container of the containers API: the one the tool
names (`container: "cntr_..."`), or for `container: "auto"` (or `{"type": "auto", "file_ids",
"memory_limit", "network_policy"}`) the container the chain or conversation already used, else a new
one (with the network its `network_policy` allows, if the sandboxes' operator allows those hosts). A
container that expired meanwhile is replaced by a new one and the model is told its earlier
names and files are gone. `outputs` (the cell's logs and images) are stored always and shown when
`include` asks for `code_interpreter_call.outputs`; files the code wrote under /mnt/data are
container files, which the answer cites with `container_file_citation` annotations.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from contract.containers.protocol import ContainersProvider
from contract.errors import InvalidRequestError
from contract.files.protocol import FilesProvider
from contract.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from contract.tool_runtime.protocol import PublicTool, ToolContext, ToolExchange
from providers.tool_runtime.code_interpreter.checks import check_auto, check_container_id
from providers.tool_runtime.code_interpreter.session import FUNCTION, CodeInterpreterSession

__all__ = ["CODE_INTERPRETER", "CodeInterpreterRuntime"]

_FIELDS = frozenset({"type", "container"})
MAX_LOGS_TO_MODEL = 20_000
"""Characters of a cell's logs the model reads (the item keeps what the sandbox returned)."""


class CodeInterpreterRuntime:
    """Implements contract.tool_runtime.protocol.ToolRuntime for `code_interpreter` tools."""

    tool_types = frozenset({"code_interpreter"})
    item_types = frozenset({"code_interpreter_call"})

    def __init__(self, containers: ContainersProvider, files: FilesProvider | None) -> None:
        self.containers = containers
        self.files = files

    async def check_tool(self, tool: Mapping[str, Any], param: str) -> None:
        for key in tool:
            if key not in _FIELDS:
                raise InvalidRequestError(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")
        container = tool.get("container")
        where = f"{param}.container"
        if container is None:
            raise InvalidRequestError(f"Missing required parameter: '{where}'.", param=where, code="missing_required_parameter")
        if isinstance(container, str):
            if container != "auto":
                await check_container_id(self.containers, container, where)
            return
        if not isinstance(container, dict) or container.get("type") != "auto":
            raise InvalidRequestError(f"Invalid value for '{where}': expected a container id, \"auto\", or an object of type 'auto'.",
                                      param=where, code="invalid_value")
        await check_auto(self.containers, self.files, container, where)

    def public_tool(self, tool: Mapping[str, Any]) -> PublicTool:
        container = tool["container"]
        if isinstance(container, dict):
            container = {"type": "auto", "file_ids": list(container.get("file_ids") or []),
                         **({"memory_limit": container["memory_limit"]} if container.get("memory_limit") else {}),
                         **({"network_policy": container["network_policy"]} if container.get("network_policy") else {})}
        return PublicTool({"type": "code_interpreter", "container": container})

    def render(self, item: Mapping[str, Any]) -> ToolExchange | None:
        code = item.get("code")
        arguments = json.dumps({"code": code if isinstance(code, str) else ""})
        return ToolExchange(str(item.get("id")), FUNCTION, arguments, _result(item))

    async def open_session(self, tools: Sequence[Mapping[str, Any]], context: ToolContext) -> CodeInterpreterSession:
        return CodeInterpreterSession(self.containers, list(tools), context)


def _result(item: Mapping[str, Any]) -> str:
    """What the model reads of a cell: its logs, its images and files, and what to know (a new container)."""
    parts: list[str] = []
    note = item.get("note")
    if isinstance(note, str) and note:
        parts.append(note)
    outputs = item.get("outputs")
    images = 0
    for output in outputs if isinstance(outputs, list) else ():
        if isinstance(output, Mapping) and output.get("type") == "logs" and isinstance(output.get("logs"), str):
            logs = output["logs"]
            parts.append(logs if len(logs) <= MAX_LOGS_TO_MODEL else logs[:MAX_LOGS_TO_MODEL] + "\n[... output cut]")
        elif isinstance(output, Mapping) and output.get("type") == "image":
            images += 1
    if images:
        parts.append(f"[{images} image{'s' if images > 1 else ''} shown to the user]")
    files = item.get("files")
    written = [str(file.get("path")) for file in files if isinstance(file, Mapping)] if isinstance(files, list) else []
    if written:
        parts.append("Files written: " + ", ".join(f"sandbox:{path}" for path in written))
    status = item.get("status")
    if status == "incomplete":
        parts.append("The code ran out of time and was stopped.")
    elif status == "failed":
        parts.append("The code could not be run.")
    elif not parts:
        parts.append("(The code ran and printed nothing.)")
    return "\n".join(parts)


@contextlib.asynccontextmanager
async def create(context: ProviderContext[EmptyConfig]) -> AsyncIterator[CodeInterpreterRuntime]:
    yield CodeInterpreterRuntime(context.deps[Api.containers], context.deps.get(Api.files))


CODE_INTERPRETER = ProviderSpec(
    api=Api.tool_runtime,
    name="code_interpreter",
    config_model=EmptyConfig,
    factory=create,
    requires=(Api.containers,),
    optional=(Api.files,),
    description="The code_interpreter tool: the model runs Python in a sandboxed container (the containers API), with files in and out",
)
