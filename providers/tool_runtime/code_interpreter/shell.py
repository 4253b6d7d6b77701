"""OpenAI's hosted `shell` tool: `{"type": "shell", "environment": {"type": "container_auto", ...}}` or
`{"type": "container_reference", "container_id": ...}` runs the model's commands in a container of
the containers API, in the sandboxes code_interpreter uses. A `shell` tool without such an
environment (or with `local`) is the client's, as before (providers/responses/client_tools.py).

The model is offered the `shell(commands, timeout_ms, max_output_length)` function a client shell
has. A call becomes two items, as OpenAI's hosted shell gives them: a `shell_call` (its `action`,
and the container as its `environment`) and a `shell_call_output` (per command `stdout`, `stderr`
and an `outcome`: the exit code, or `timeout`), with `response.shell_call_command.*` and
`response.shell_call_output_content.*` events. Both read to the model as a client shell's call and
output do (the responses provider renders those item types), so a chain replays the same either way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from contract.containers.protocol import ContainersProvider
from contract.errors import InvalidRequestError
from contract.files.protocol import FilesProvider
from contract.items import new_id
from contract.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from contract.tool_runtime.protocol import FunctionSpec, ItemSink, ModelCall, PublicTool, Step, ToolContext, ToolExchange
from providers.tool_runtime.code_interpreter.checks import check_auto, check_container_id, with_network
from providers.tool_runtime.code_interpreter.choice import ContainerChoice, wanted

__all__ = ["CONTAINER_SHELL", "ContainerShellRuntime"]

DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_OUTPUT = 10_000
_PARAMETERS = {"type": "object", "properties": {
    "commands": {"type": "array", "items": {"type": "string"}, "description": "Shell command lines to run, in order"},
    "timeout_ms": {"type": "integer", "description": "How long each command may run"},
    "max_output_length": {"type": "integer", "description": "At most this many characters of each command's output"}},
    "required": ["commands"]}
_DESCRIPTION = ("Run shell commands in a sandboxed Linux container, one after the other, from /mnt/data (where the user's files "
                "are); the output of each comes back. Python 3 with numpy, pandas and matplotlib is installed; there is no internet access.")
# One command, run by the container's kernel: its output cut in the sandbox, so a flood never crosses the pipe.
_RUN = """import json as _json, subprocess as _subprocess
try:
    _done = _subprocess.run({command!r}, shell=True, cwd="/mnt/data", capture_output=True, timeout={timeout!r})
    _reply = {{"stdout": _done.stdout, "stderr": _done.stderr, "outcome": {{"type": "exit", "exit_code": _done.returncode}}}}
except _subprocess.TimeoutExpired as _late:
    _reply = {{"stdout": _late.stdout or b"", "stderr": _late.stderr or b"", "outcome": {{"type": "timeout"}}}}
for _key in ("stdout", "stderr"):
    _reply[_key] = _reply[_key].decode("utf-8", "replace")[-{limit!r}:]
print(_json.dumps(_reply))"""


class ContainerShellRuntime:
    """Implements contract.tool_runtime.protocol.ToolRuntime for `shell` tools with a container environment."""

    tool_types = frozenset({"shell"})
    item_types: frozenset[str] = frozenset()  # shell_call and shell_call_output read to the model as a client shell's

    def __init__(self, containers: ContainersProvider, files: FilesProvider | None) -> None:
        self.containers = containers
        self.files = files

    async def check_tool(self, tool: Mapping[str, Any], param: str) -> None:
        for key in tool:
            if key not in ("type", "environment"):
                raise InvalidRequestError(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")
        environment = tool["environment"]
        where = f"{param}.environment"
        if environment["type"] == "container_reference":
            for key in environment:
                if key not in ("type", "container_id"):
                    raise InvalidRequestError(f"Unknown parameter: '{where}.{key}'.", param=f"{where}.{key}", code="unknown_parameter")
            container_id = environment.get("container_id")
            if not isinstance(container_id, str) or not container_id:
                raise InvalidRequestError(f"Missing required parameter: '{where}.container_id'.", param=f"{where}.container_id",
                                          code="missing_required_parameter")
            await check_container_id(self.containers, container_id, f"{where}.container_id")
            return
        await check_auto(self.containers, self.files, environment, where)

    def public_tool(self, tool: Mapping[str, Any]) -> PublicTool:
        environment = dict(tool["environment"])
        if environment["type"] == "container_auto":
            environment = {"type": "container_auto", "file_ids": list(environment.get("file_ids") or []),
                           **{key: environment[key] for key in ("memory_limit", "network_policy") if environment.get(key) is not None}}
        return PublicTool({"type": "shell", "environment": environment})

    def render(self, item: Mapping[str, Any]) -> ToolExchange | None:
        return None

    async def open_session(self, tools: Sequence[Mapping[str, Any]], context: ToolContext) -> ContainerShellSession:
        earlier = [str(item["environment"]["container_id"]) for item in (*context.history, *context.input)
                   if isinstance(item, Mapping) and item.get("type") == "shell_call" and isinstance(item.get("environment"), Mapping)
                   and isinstance(item["environment"].get("container_id"), str)]
        return ContainerShellSession(ContainerChoice(self.containers, f"shell {context.response_id}", earlier), list(tools))


class ContainerShellSession:
    """Implements contract.tool_runtime.protocol.ToolSession for a request's hosted shell tools."""

    def __init__(self, choice: ContainerChoice, tools: list[Mapping[str, Any]]) -> None:
        self.choice = choice
        self.tools = tools

    def preparations(self) -> Sequence[Step]:
        return ()

    def functions(self) -> Sequence[FunctionSpec]:
        return [FunctionSpec("shell", _PARAMETERS, with_network(_DESCRIPTION, tool["environment"]), group="shell", key=str(index))
                for index, tool in enumerate(self.tools)]

    def pending_calls(self) -> Sequence[ModelCall]:
        return ()

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        return None

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        index = int(call.name) if call.name.isdigit() and int(call.name) < len(self.tools) else 0
        action = _action(call.arguments)
        notes: list[str] = []
        container_id = await self.choice.container(index, wanted(self.tools[index]["environment"]), notes)
        shell_call = sink.open({"id": new_id("sh"), "type": "shell_call", "call_id": call.call_id, "status": "in_progress",
                                "action": action, "environment": {"type": "container_reference", "container_id": container_id}})
        for number, command in enumerate(action["commands"]):
            shell_call.emit("response.shell_call_command.added", command="", command_index=number)
            shell_call.emit("response.shell_call_command.delta", delta=command, command_index=number)
            shell_call.emit("response.shell_call_command.done", command=command, command_index=number)
        shell_call.item["status"] = "completed"
        output = sink.open({"id": new_id("sho"), "type": "shell_call_output", "call_id": call.call_id, "status": "in_progress",
                            "output": [], "max_output_length": action["max_output_length"]})
        for number, command in enumerate(action["commands"]):
            entry = await self._command(index, shell_call.item, command, action, notes)
            if notes:  # a new container: said once, before what the command printed
                entry = {**entry, "stderr": "\n".join([*notes, entry["stderr"]]).strip("\n")}
                notes.clear()
            output.item["output"].append(entry)
            output.emit("response.shell_call_output_content.delta", command_index=number,
                        delta={"stdout": entry["stdout"], "stderr": entry["stderr"]})
            output.emit("response.shell_call_output_content.done", command_index=number, output=[entry])
        output.item["status"] = "completed"

    async def _command(self, index: int, call: dict[str, Any], command: str, action: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
        code = _RUN.format(command=command, timeout=action["timeout_ms"] / 1000, limit=action["max_output_length"])
        container_id, ran = await self.choice.run(index, wanted(self.tools[index]["environment"]), call["environment"]["container_id"],
                                                  code, notes)
        call["environment"] = {"type": "container_reference", "container_id": container_id}
        if ran is None:
            return {"stdout": "", "stderr": "The container is gone.", "outcome": {"type": "exit", "exit_code": 1}}
        return _entry(ran.output.logs, ran.output.status)

    def citations(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def _action(arguments: str) -> dict[str, Any]:
    """The call's commands and limits, as the model wrote them (anything malformed reads as no command)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = {}
    parsed = parsed if isinstance(parsed, dict) else {}
    commands = parsed.get("commands")
    commands = [commands] if isinstance(commands, str) else commands if isinstance(commands, list) else []
    timeout, limit = parsed.get("timeout_ms"), parsed.get("max_output_length")
    return {"commands": [command for command in commands if isinstance(command, str)],
            "timeout_ms": timeout if isinstance(timeout, int) and 0 < timeout <= 600_000 else DEFAULT_TIMEOUT_MS,
            "max_output_length": limit if isinstance(limit, int) and 0 < limit <= 1_000_000 else DEFAULT_OUTPUT}


def _entry(logs: str, status: str) -> dict[str, Any]:
    """The command's output entry, from what the kernel printed (its JSON line, or its own failure)."""
    last = logs.strip().rsplit("\n", 1)[-1]
    try:
        entry = json.loads(last)
    except ValueError:
        entry = None
    if isinstance(entry, dict) and isinstance(entry.get("outcome"), dict):
        return entry
    if status == "timeout":
        return {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}
    return {"stdout": "", "stderr": logs[-DEFAULT_OUTPUT:], "outcome": {"type": "exit", "exit_code": 1}}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[EmptyConfig]) -> AsyncIterator[ContainerShellRuntime]:
    yield ContainerShellRuntime(context.deps[Api.containers], context.deps.get(Api.files))


CONTAINER_SHELL = ProviderSpec(
    api=Api.tool_runtime,
    name="container_shell",
    config_model=EmptyConfig,
    factory=create,
    requires=(Api.containers,),
    optional=(Api.files,),
    description="OpenAI's hosted shell tool (environment container_auto or container_reference): commands run in a sandboxed container",
)
