"""One request's code_interpreter tools: which container each runs in, and each call's item."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contract.containers.protocol import CodeRun, ContainersProvider
from contract.errors import APIError
from contract.items import new_id
from contract.tool_runtime.protocol import FunctionSpec, ItemSink, ModelCall, OutputItem, Step, ToolContext
from providers.tool_runtime.code_interpreter.checks import with_network
from providers.tool_runtime.code_interpreter.choice import ContainerChoice, wanted
from providers.tool_runtime.code_interpreter.citations import ContainerFileCitations

__all__ = ["FUNCTION", "CodeInterpreterSession"]

log = logging.getLogger("stack")

FUNCTION = "python"
_PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python code to run, as in a notebook cell"}},
    "required": ["code"],
}
_DESCRIPTION = (
    "Run Python code in a stateful sandbox, like a Jupyter notebook: names defined by one call stay for the next, and the value "
    "of a last expression is shown. numpy, pandas and matplotlib are installed; there is no internet access. The user's files "
    "are in /mnt/data. Save files for the user in /mnt/data and link them in your answer as sandbox:/mnt/data/<name>; "
    "plots shown with matplotlib are given to the user as images.")
_RESTARTED = ("The Python kernel was restarted before this code ran: names defined by earlier code are gone; the files in "
              "/mnt/data are kept.")


class CodeInterpreterSession:
    """Implements contract.tool_runtime.protocol.ToolSession for a request's code_interpreter tools."""

    def __init__(self, containers: ContainersProvider, tools: list[Mapping[str, Any]], context: ToolContext) -> None:
        self.containers = containers
        self.tools = tools
        earlier = [str(item["container_id"]) for item in _calls(context)]
        self.choice = ContainerChoice(containers, f"code_interpreter {context.response_id}", earlier)
        self._used = set(earlier)
        """Containers an earlier cell ran in: a fresh kernel in one of them means a restart the model is told of."""
        self._files: list[dict[str, Any]] = []

    def preparations(self) -> Sequence[Step]:
        return ()

    def functions(self) -> Sequence[FunctionSpec]:
        return [FunctionSpec(FUNCTION, _PARAMETERS, _description(tool), group="code_interpreter", key=str(index))
                for index, tool in enumerate(self.tools)]

    def pending_calls(self) -> Sequence[ModelCall]:
        return ()

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        return None

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        index = int(call.name) if call.name.isdigit() and int(call.name) < len(self.tools) else 0
        code = _code(call.arguments)
        notes: list[str] = []
        try:
            container_id = await self.choice.container(index, wanted(self.tools[index]["container"]), notes)
        except APIError as error:  # the container could not be made (a memory limit over this server's, a file gone)
            item = sink.open(_item("", code))
            item.item.update(status="failed", note=f"No container could be made for the code: {error.message}")
            return
        item = sink.open(_item(container_id, ""))
        item.emit("response.code_interpreter_call.in_progress")
        if code:
            item.emit("response.code_interpreter_call_code.delta", delta=code)
        item.item["code"] = code
        item.emit("response.code_interpreter_call_code.done", code=code)
        item.item["status"] = "interpreting"
        item.emit("response.code_interpreter_call.interpreting")
        ran = await self._run(index, item, code, notes)
        if ran is not None:
            self._finish(item, ran, notes)

    async def _run(self, index: int, item: OutputItem, code: str, notes: list[str]) -> CodeRun | None:
        try:
            item.item["container_id"], ran = await self.choice.run(index, wanted(self.tools[index]["container"]),
                                                                   item.item["container_id"], code, notes)
        except Exception as error:
            item.item["container_id"] = self.choice.chosen(index) or item.item["container_id"]
            log.exception("code_interpreter: running a cell in %s failed", item.item["container_id"])
            item.item.update(status="failed", note=_note(notes, f"The sandbox failed to run the code ({type(error).__name__})."))
            return None
        if ran is None:
            item.item.update(status="failed", note=_note(notes, "The container is gone."))
        return ran

    def _finish(self, item: OutputItem, ran: CodeRun, notes: list[str]) -> None:
        container_id = item.item["container_id"]
        if ran.output.fresh_kernel and container_id in self._used:
            notes.append(_RESTARTED)
        self._used.add(container_id)
        outputs: list[dict[str, Any]] = [{"type": "logs", "logs": ran.output.logs}] if ran.output.logs else []
        outputs += [{"type": "image", "url": "data:image/png;base64," + base64.b64encode(png).decode()} for png in ran.output.images]
        files = [{"id": file["id"], "container_id": file["container_id"], "path": file["path"]} for file in ran.files]
        self._files = [known for known in self._files if known["path"] not in {file["path"] for file in files}] + files
        item.item.update(status="incomplete" if ran.output.status == "timeout" else "completed", outputs=outputs, files=files)
        if notes:
            item.item["note"] = "\n".join(notes)
        if item.item["status"] == "completed":
            item.emit("response.code_interpreter_call.completed")

    def citations(self) -> ContainerFileCitations | None:
        """The answer's links to the files this response's code wrote."""
        return ContainerFileCitations(self._files) if self._files else None

    async def aclose(self) -> None:
        return None


def _description(tool: Mapping[str, Any]) -> str:
    return with_network(_DESCRIPTION, tool.get("container"))


def _item(container_id: str, code: str) -> dict[str, Any]:
    return {"id": new_id("ci"), "type": "code_interpreter_call", "status": "in_progress", "code": code,
            "container_id": container_id, "outputs": None}


def _calls(context: ToolContext) -> list[Mapping[str, Any]]:
    """Earlier code_interpreter calls of the chain or conversation that ran in a container."""
    return [item for item in (*context.history, *context.input) if isinstance(item, Mapping)
            and item.get("type") == "code_interpreter_call" and isinstance(item.get("container_id"), str) and item["container_id"]]


def _code(arguments: str) -> str:
    """The code of a call: `{"code": ...}` as offered; a model that wrote the bare code gets it run as written."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    if isinstance(parsed, dict):
        code = parsed.get("code", parsed.get("input"))
        return code if isinstance(code, str) else ""
    return parsed if isinstance(parsed, str) else arguments


def _note(notes: list[str], last: str) -> str:
    return "\n".join([*notes, last])
