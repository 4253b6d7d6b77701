"""Tools the client runs: functions, and the tool types coding agents send beside them: `custom`
(freeform text input), `namespace` (functions and custom tools grouped under a name),
`apply_patch`, `shell`, `local_shell`, and `tool_search` run by the client, which loads tools
marked `defer_loading` (they reach the model only once a `tool_search_output` has loaded them).

A chat model knows only functions, so each is offered to it as one, under a name that depends on
the tool alone: a function or custom tool its own name, a member of namespace `ns` `ns__name`,
and the other types their type (`apply_patch`, `shell`, `local_shell`). Two tools of a request
that would reach the model under one name are a 400. The model's call of such a function comes
back as the tool type's own output item (`custom_tool_call`, `apply_patch_call`...), and those
items, sent back as input with their outputs, read to the model as the call and result they
stand for (`call_input`, `output_text`), so a chain works turn after turn with any model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from providers.responses.grammars import Grammar, GrammarError, compile_grammar
from contract.errors import InvalidRequestError
from contract.responses.models import hosted_shell

__all__ = ["CLIENT_TOOL_TYPES", "ClientTool", "call_input", "client_tools", "loaded_tools", "output_text", "tool_choice_name"]

CLIENT_TOOL_TYPES = frozenset({"function", "custom", "namespace", "apply_patch", "shell", "local_shell", "tool_search"})
CALL_TYPES = frozenset({"custom_tool_call", "apply_patch_call", "shell_call", "local_shell_call", "tool_search_call"})
OUTPUT_TYPES = frozenset({"custom_tool_call_output", "apply_patch_call_output", "shell_call_output", "local_shell_call_output",
                          "tool_search_output"})

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64

_APPLY_PATCH = {
    "description": "Create, update or delete one file of the user's workspace. For create_file, `diff` holds the new file's "
                   "lines, each prefixed with '+'; for update_file, a diff of the change (context lines prefixed with ' ', "
                   "removed lines with '-', added lines with '+', hunks introduced by '@@'); delete_file takes no diff.",
    "parameters": {"type": "object", "properties": {
        "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
        "path": {"type": "string", "description": "The file's path, relative to the workspace"},
        "diff": {"type": "string"}}, "required": ["type", "path"]},
}
_SHELL = {
    "description": "Run shell commands in the user's environment, one after the other; the output of each comes back.",
    "parameters": {"type": "object", "properties": {
        "commands": {"type": "array", "items": {"type": "string"}, "description": "Shell command lines to run, in order"},
        "timeout_ms": {"type": "integer", "description": "How long the commands may run"},
        "max_output_length": {"type": "integer", "description": "At most this many characters of each command's output"}},
        "required": ["commands"]},
}
_LOCAL_SHELL = {
    "description": "Run one command on the user's machine (argv form: the program, then its arguments).",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "array", "items": {"type": "string"}},
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}}},
        "required": ["command"]},
}
_TOOL_SEARCH = {
    "description": "Search for more tools to load: describe the capability you need; the matching tools become available.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "What the tools should do"}},
                   "required": ["query"]},
}
_BUILT_IN = {"apply_patch": _APPLY_PATCH, "shell": _SHELL, "local_shell": _LOCAL_SHELL, "tool_search": _TOOL_SEARCH}


def model_name(kind: str, name: str | None = None, namespace: str | None = None) -> str:
    """The function name the model knows a client tool by."""
    if kind in _BUILT_IN:
        return kind
    base = _NAME_UNSAFE.sub("_", str(name)) or "tool"
    return (f"{_NAME_UNSAFE.sub('_', namespace)}__{base}" if namespace else base)[:MAX_NAME]


@dataclass(frozen=True)
class ClientTool:
    """A client tool as the model sees it, and how its calls become output items."""

    kind: str
    """function, custom, apply_patch, shell or local_shell (a namespace's members are functions and custom tools)."""
    name: str
    namespace: str | None
    model_name: str
    chat: dict[str, Any]
    """The Chat Completions tool definition."""
    environment: dict[str, Any] | None = None
    deferred: bool = False
    """Marked `defer_loading`: offered only once a tool search has loaded it."""
    grammar: Grammar | None = None
    """A custom tool's grammar: its input is checked against it (the model is not held to it)."""

    def output_item(self, call_id: str, arguments: str, make_id: Callable[[str], str], status: str = "completed") -> dict[str, Any]:
        """The output item of the model's call, in the tool type's own shape."""
        if self.kind == "function":
            function: dict[str, Any] = {"id": make_id("fc"), "type": "function_call", "status": status, "call_id": call_id,
                                        "name": self.name, "arguments": arguments}
            return {**function, "namespace": self.namespace} if self.namespace else function
        parsed = _arguments(arguments)
        if self.kind == "custom":
            text = parsed.get("input") if isinstance(parsed.get("input"), str) else arguments if not parsed else json.dumps(parsed)
            item: dict[str, Any] = {"id": make_id("ctc"), "type": "custom_tool_call", "call_id": call_id, "name": self.name, "input": text}
            return {**item, "namespace": self.namespace} if self.namespace else item
        if self.kind == "apply_patch":
            operation: dict[str, Any] = {"type": parsed.get("type") if parsed.get("type") in ("create_file", "update_file", "delete_file")
                         else "update_file", "path": str(parsed.get("path") or "")}
            if operation["type"] != "delete_file":
                operation["diff"] = str(parsed.get("diff") or "")
            return {"id": make_id("apc"), "type": "apply_patch_call", "status": status, "call_id": call_id, "operation": operation}
        if self.kind == "shell":
            commands = parsed.get("commands")
            action: dict[str, Any] = {"commands": [str(c) for c in commands] if isinstance(commands, list) else [str(commands or "")],
                      "timeout_ms": _integer(parsed.get("timeout_ms")), "max_output_length": _integer(parsed.get("max_output_length"))}
            shell: dict[str, Any] = {"id": make_id("sh"), "type": "shell_call", "status": status, "call_id": call_id, "action": action}
            return {**shell, "environment": self.environment} if self.environment else shell
        if self.kind == "tool_search":
            return {"id": make_id("tsc"), "type": "tool_search_call", "call_id": call_id, "execution": "client",
                    "status": status if status in ("in_progress", "completed", "incomplete") else "completed", "arguments": parsed}
        command = parsed.get("command")
        env = parsed.get("env")
        return {"id": make_id("lsh"), "type": "local_shell_call", "status": status, "call_id": call_id, "action": {
            "type": "exec", "command": [str(c) for c in command] if isinstance(command, list) else str(command or "").split(),
            "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
            "timeout_ms": _integer(parsed.get("timeout_ms")),
            "working_directory": parsed.get("working_directory") if isinstance(parsed.get("working_directory"), str) else None,
            "user": None}}


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def loaded_tools(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tool definitions `tool_search_output` items of a context have loaded, in order."""
    return [dict(tool) for item in items if item.get("type") == "tool_search_output"
            for tool in item.get("tools") or () if isinstance(tool, Mapping)]


def client_tools(tools: Sequence[Mapping[str, Any]], loaded: Sequence[Mapping[str, Any]] = ()) -> list[ClientTool]:
    """The client tools the model sees, each under its model name (a 400 when two of the request's
    share one): the request's, less those marked `defer_loading` that no tool search has loaded,
    and the tools a `tool_search_output` of the context loaded that the request does not have."""
    found: list[ClientTool] = []
    where: dict[str, str] = {}
    for index, tool in enumerate(tools):
        for path, member, namespace in _members(tool, f"tools[{index}]"):
            entry = _client_tool(member, namespace)
            if entry is None:
                continue
            if entry.model_name in where:
                raise InvalidRequestError(
                    f"Invalid value for '{path}': the tool name {entry.model_name!r} is already used by '{where[entry.model_name]}'. "
                    "Tool names must be unique.", param=path, code="invalid_value")
            where[entry.model_name] = path
            found.append(entry)
    names = {entry.model_name for tool in loaded for _, member, namespace in _members(tool, "")
             if (entry := _client_tool(member, namespace)) is not None}
    offered = [entry for entry in found if not entry.deferred or entry.model_name in names]
    for tool in loaded:
        for _, member, namespace in _members(tool, ""):
            entry = _client_tool(member, namespace)
            if entry is not None and entry.model_name not in where:
                where[entry.model_name] = "tool_search_output"
                offered.append(entry)
    return offered


def _members(tool: Mapping[str, Any], path: str) -> list[tuple[str, Mapping[str, Any], str | None]]:
    """A tool as the functions it offers: itself, or a namespace's members (with its name)."""
    if tool.get("type") != "namespace":
        return [(path, tool, None)]
    group = str(tool.get("name") or "")
    return [(f"{path}.tools[{n}]", member, group) for n, member in enumerate(tool.get("tools") or ()) if isinstance(member, Mapping)]


def _client_tool(tool: Mapping[str, Any], namespace: str | None) -> ClientTool | None:
    kind = tool.get("type")
    if hosted_shell(tool):  # a shell in a container: the server's (a tool runtime offers it)
        return None
    if kind == "function":
        name = str(tool["name"])
        chat = {key: tool[key] for key in ("description", "parameters", "strict") if tool.get(key) is not None}
    elif kind == "custom":
        name = str(tool["name"])
        chat = {"description": _custom_description(tool), "parameters": {
            "type": "object", "properties": {"input": {"type": "string", "description": "The tool's input, as free text"}},
            "required": ["input"]}}
    elif kind in _BUILT_IN:
        name = str(kind)
        chat = dict(_BUILT_IN[kind])
    else:
        return None
    model = model_name(str(kind), name, namespace)
    environment = tool.get("environment") if kind == "shell" and isinstance(tool.get("environment"), dict) else None
    if kind == "tool_search":
        chat = {"description": tool.get("description") or chat["description"],
                "parameters": tool.get("parameters") if isinstance(tool.get("parameters"), dict) else chat["parameters"]}
    return ClientTool(str(kind), name, namespace, model, {"type": "function", "function": {"name": model, **chat}}, environment,
                      deferred=tool.get("defer_loading") is True, grammar=_grammar(tool) if kind == "custom" else None)


def _grammar(tool: Mapping[str, Any]) -> Grammar | None:
    fmt = tool.get("format")
    if not isinstance(fmt, Mapping) or fmt.get("type") != "grammar":
        return None
    return compile_grammar(str(fmt.get("syntax")), str(fmt.get("definition")))  # checked (and cached) by check_client_tool


def _custom_description(tool: Mapping[str, Any]) -> str:
    description = str(tool.get("description") or "")
    fmt = tool.get("format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "grammar":
        description += (f"\n\nThe input must be text matching this {fmt.get('syntax', 'lark')} grammar:\n{fmt.get('definition', '')}")
    return description.strip() or f"The {tool.get('name')} tool (free text input)"


def check_client_tool(tool: Mapping[str, Any], path: str) -> None:
    """The shape checks of a client tool that is not a plain function."""
    kind = tool.get("type")
    if kind == "namespace":
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise InvalidRequestError(f"Missing required parameter: '{path}.name'.", param=f"{path}.name", code="missing_required_parameter")
        members = tool.get("tools")
        if not isinstance(members, list) or not members:
            raise InvalidRequestError(f"Invalid '{path}.tools': expected a non-empty array of function and custom tools.",
                                      param=f"{path}.tools", code="invalid_value")
        for index, member in enumerate(members):
            member_path = f"{path}.tools[{index}]"
            if not isinstance(member, Mapping) or member.get("type") not in ("function", "custom"):
                raise InvalidRequestError(f"Invalid value for '{member_path}.type': a namespace holds function and custom tools.",
                                          param=f"{member_path}.type", code="invalid_value")
            _check_named(member, member_path)
    elif kind in ("custom", "function"):
        _check_named(tool, path)
    elif kind == "tool_search" and tool.get("execution") != "client":
        raise InvalidRequestError(f"Invalid value for '{path}.execution': tool search runs on the client here: set execution to 'client' "
                                  "(the client answers each tool_search_call with a tool_search_output).", param=f"{path}.execution",
                                  code="invalid_value")
    if kind == "custom":
        fmt = tool.get("format")
        if fmt is not None and (not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "grammar")):
            raise InvalidRequestError(f"Invalid value for '{path}.format.type': expected 'text' or 'grammar'.",
                                      param=f"{path}.format.type", code="invalid_value")
        if isinstance(fmt, Mapping) and fmt.get("type") == "grammar":
            if fmt.get("syntax") not in ("lark", "regex"):
                raise InvalidRequestError(f"Invalid value for '{path}.format.syntax': expected 'lark' or 'regex'.",
                                          param=f"{path}.format.syntax", code="invalid_value")
            if not isinstance(fmt.get("definition"), str) or not fmt["definition"]:
                raise InvalidRequestError(f"Missing required parameter: '{path}.format.definition'.",
                                          param=f"{path}.format.definition", code="missing_required_parameter")
            try:
                compile_grammar(fmt["syntax"], fmt["definition"])
            except GrammarError as error:
                raise InvalidRequestError(f"Invalid '{path}.format.definition': not a valid {fmt['syntax']} grammar: {error}",
                                          param=f"{path}.format.definition", code="invalid_value") from None


def _check_named(tool: Mapping[str, Any], path: str) -> None:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise InvalidRequestError(f"Missing required parameter: '{path}.name'.", param=f"{path}.name", code="missing_required_parameter")
    if tool.get("type") == "function" and tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
        raise InvalidRequestError(f"Invalid type for '{path}.parameters': expected a JSON schema object.", param=f"{path}.parameters",
                                  code="invalid_type")


def tool_choice_name(choice: Mapping[str, Any]) -> str | None:
    """The model name a tool_choice object forces, when it names a client tool."""
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return model_name(str(kind), str(choice.get("name") or ""), choice.get("namespace") if isinstance(choice.get("namespace"), str)
                          else None)
    if kind in _BUILT_IN:
        return str(kind)
    return None


# --- back to the model ---------------------------------------------------------------------------


def call_input(item: Mapping[str, Any]) -> tuple[str, str]:
    """(model name, arguments) of a client tool call item sent back as input."""
    kind = item.get("type")
    if kind == "custom_tool_call":
        return model_name("custom", str(item.get("name") or ""), item.get("namespace")), json.dumps({"input": str(item.get("input") or "")})
    if kind == "apply_patch_call":
        return "apply_patch", json.dumps(item.get("operation") or {})
    if kind == "tool_search_call":
        arguments = item.get("arguments")
        return "tool_search", arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    if kind == "shell_call":
        action = item.get("action") or {}
        return "shell", json.dumps({key: value for key, value in action.items() if value is not None})
    action = item.get("action") or {}
    return "local_shell", json.dumps({key: action[key] for key in ("command", "working_directory", "timeout_ms", "env")
                                      if action.get(key) is not None})


def output_call_id(item: Mapping[str, Any]) -> str:
    """The call an output item answers (`local_shell_call_output` names it by `id`, as the Agents SDK sends it)."""
    return str(item.get("call_id") or item.get("id") or "")


def output_text(item: Mapping[str, Any]) -> str | list[Any]:
    """What a client tool's output item tells the model."""
    kind = item.get("type")
    output = item.get("output")
    if kind == "apply_patch_call_output":
        status = str(item.get("status") or "completed")
        return f"{status}: {output}" if output else status
    if kind == "tool_search_output":
        found = [f"{tool.get('name') or tool.get('type')}: {tool.get('description') or ''}".rstrip(": ")
                 for tool in item.get("tools") or () if isinstance(tool, Mapping)]
        return "Tools loaded: " + "; ".join(found) if found else "No tools matched."
    if kind == "shell_call_output" and isinstance(output, list):
        texts = []
        for entry in output:
            if not isinstance(entry, Mapping):
                continue
            outcome = entry.get("outcome") or {}
            end = "timed out" if outcome.get("type") == "timeout" else f"exit code {outcome.get('exit_code')}"
            texts.append("\n".join(text for text in (str(entry.get("stdout") or ""), str(entry.get("stderr") or ""), f"({end})") if text))
        return "\n\n".join(texts)
    return output if isinstance(output, (str, list)) else json.dumps(output)
