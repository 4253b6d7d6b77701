"""The shapes of chat completions' structured parameters (`tools`, `tool_choice`,
`response_format`), checked as OpenAI checks them, each mistake a 400 naming the field.

Only the standard shapes are checked; what a vendor adds inside them (or beside them, through
`extra_body`) passes on. Each check runs only when its parameter is present.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from runtime.errors import InvalidRequestError

__all__ = ["SHAPES"]

_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOOL_TYPES = ("function", "custom")
_CHOICES = ("none", "auto", "required")
_FORMATS = ("text", "json_object", "json_schema")


def _invalid(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _check_tools(tools: Any, body: Mapping[str, Any]) -> None:
    if not isinstance(tools, list):
        raise _invalid("Invalid type for 'tools': expected an array of tools.", "tools", "invalid_type")
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise _invalid(f"Invalid type for '{where}': expected an object.", where, "invalid_type")
        kind = tool.get("type")
        if kind not in _TOOL_TYPES:
            raise _invalid(f"Invalid value for '{where}.type': {str(kind)[:40]!r} (expected one of: {', '.join(_TOOL_TYPES)}).",
                           f"{where}.type", "invalid_value" if kind is not None else "missing_required_parameter")
        definition = tool.get(kind)
        if not isinstance(definition, dict):
            raise _invalid(f"Missing required parameter: '{where}.{kind}'.", f"{where}.{kind}", "missing_required_parameter")
        name = definition.get("name")
        if not isinstance(name, str):
            raise _invalid(f"Missing required parameter: '{where}.{kind}.name'.", f"{where}.{kind}.name", "missing_required_parameter")
        if not _FUNCTION_NAME.fullmatch(name):
            raise _invalid(f"Invalid '{where}.{kind}.name': string does not match pattern. Expected a string that matches the "
                           "pattern '^[a-zA-Z0-9_-]{1,64}$'.", f"{where}.{kind}.name")
        parameters = definition.get("parameters")
        if kind == "function" and parameters is not None and not isinstance(parameters, dict):
            raise _invalid(f"Invalid type for '{where}.function.parameters': expected an object (a JSON Schema).",
                           f"{where}.function.parameters", "invalid_type")


def _check_tool_choice(choice: Any, body: Mapping[str, Any]) -> None:
    if isinstance(choice, str):
        if choice not in _CHOICES:
            raise _invalid(f"Invalid value for 'tool_choice': {choice[:40]!r} (expected one of: {', '.join(_CHOICES)}, or an object "
                           "naming a tool).", "tool_choice")
    elif isinstance(choice, dict):
        kind = choice.get("type")
        if kind in _TOOL_TYPES:
            named = choice.get(kind)
            if not isinstance(named, dict) or not isinstance(named.get("name"), str):
                raise _invalid(f"Missing required parameter: 'tool_choice.{kind}.name'.", f"tool_choice.{kind}.name",
                               "missing_required_parameter")
        elif kind != "allowed_tools":
            raise _invalid(f"Invalid value for 'tool_choice.type': {str(kind)[:40]!r} (expected function, custom or allowed_tools).",
                           "tool_choice.type")
    elif choice is not None:
        raise _invalid("Invalid type for 'tool_choice': expected a string or an object.", "tool_choice", "invalid_type")
    if choice not in (None, "none") and not body.get("tools"):
        raise _invalid("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.", "tool_choice")


def _check_response_format(value: Any, body: Mapping[str, Any]) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise _invalid("Invalid type for 'response_format': expected an object.", "response_format", "invalid_type")
    kind = value.get("type")
    if kind not in _FORMATS:
        raise _invalid(f"Invalid value for 'response_format.type': {str(kind)[:40]!r} (expected one of: {', '.join(_FORMATS)}).",
                       "response_format.type", "invalid_value" if kind is not None else "missing_required_parameter")
    if kind == "json_schema":
        schema = value.get("json_schema")
        if not isinstance(schema, dict):
            raise _invalid("Missing required parameter: 'response_format.json_schema'.", "response_format.json_schema",
                           "missing_required_parameter")
        name = schema.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
            raise _invalid("Invalid 'response_format.json_schema.name': expected a string matching '^[a-zA-Z0-9_-]{1,64}$'.",
                           "response_format.json_schema.name", "invalid_value" if name is not None else "missing_required_parameter")


SHAPES: dict[str, Callable[[Any, Mapping[str, Any]], None]] = {
    "tools": _check_tools, "tool_choice": _check_tool_choice, "response_format": _check_response_format,
}
"""Parameter name -> its check (given the value and the whole body)."""
