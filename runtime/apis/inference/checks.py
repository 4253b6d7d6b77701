"""The shapes of chat completions' structured parameters (`tools`, `tool_choice`,
`response_format`, `modalities`, `stop`, `seed`, `logit_bias`, `user`) and of a message's content parts,
checked as OpenAI checks them, each mistake a 400 naming the field.

Only the standard shapes are checked; what a vendor adds inside them (or beside them, through
`extra_body`) passes on. Each check runs only when its parameter is present.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from contract.errors import InvalidRequestError

__all__ = ["COMMON_SHAPES", "SHAPES", "check_message", "json_type_name"]

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


# Parsed JSON holds exactly these classes (a bool is not looked up as an int).
_JSON_TYPES = {bool: "a boolean", str: "a string", list: "an array", dict: "an object", float: "a decimal", int: "an integer"}


def json_type_name(value: Any) -> str:
    """What a parsed JSON value is, as OpenAI's messages say it ("an integer", "a string"...)."""
    return _JSON_TYPES.get(value.__class__, "null")


def _check_stop(stop: Any, body: Mapping[str, Any]) -> None:
    # OpenAI allows 4 stop sequences; vLLM and others more, so their number is left to the upstream.
    if stop is None or stop.__class__ is str:
        return
    if stop.__class__ is not list or not all(item.__class__ is str for item in stop):
        raise _invalid("Invalid type for 'stop': expected a string or an array of strings.", "stop", "invalid_type")


def _check_seed(seed: Any, body: Mapping[str, Any]) -> None:
    if seed is not None and seed.__class__ is not int:
        raise _invalid(f"Invalid type for 'seed': expected an integer, but got {json_type_name(seed)} instead.", "seed", "invalid_type")


def _check_logit_bias(bias: Any, body: Mapping[str, Any]) -> None:
    if bias is None:
        return
    if bias.__class__ is not dict:
        raise _invalid(f"Invalid type for 'logit_bias': expected an object, but got {json_type_name(bias)} instead.", "logit_bias", "invalid_type")
    for token, value in bias.items():
        if not token.isdigit():
            raise _invalid(f"Invalid key in 'logit_bias': {token[:40]!r}. Keys are token ids, integers given as strings.", "logit_bias")
        if value.__class__ not in (int, float) or not -100 <= value <= 100:
            raise _invalid(f"Invalid value for 'logit_bias[{token}]': expected a number from -100 to 100.", "logit_bias")


def _check_user(user: Any, body: Mapping[str, Any]) -> None:
    if user is not None and user.__class__ is not str:
        raise _invalid(f"Invalid type for 'user': expected a string, but got {json_type_name(user)} instead.", "user", "invalid_type")


_MODALITIES = ("text", "audio")


def _check_modalities(modalities: Any, body: Mapping[str, Any]) -> None:
    if modalities is None:
        return
    if modalities.__class__ is not list or not all(item.__class__ is str for item in modalities):
        raise _invalid("Invalid type for 'modalities': expected an array of strings.", "modalities", "invalid_type")
    for item in modalities:
        if item not in _MODALITIES:
            raise _invalid(f"Invalid value for 'modalities': {item[:40]!r} (expected one of: text, audio).", "modalities")


COMMON_SHAPES: dict[str, Callable[[Any, Mapping[str, Any]], None]] = {
    "stop": _check_stop, "seed": _check_seed, "logit_bias": _check_logit_bias, "user": _check_user,
}
"""The checks chat and legacy completions share: parameter name -> its check (given the value and the whole body)."""

SHAPES: dict[str, Callable[[Any, Mapping[str, Any]], None]] = {
    "tools": _check_tools, "tool_choice": _check_tool_choice, "response_format": _check_response_format, "modalities": _check_modalities,
    **COMMON_SHAPES,
}
"""Chat's checks: parameter name -> its check (given the value and the whole body)."""


# The parts OpenAI's roles may send (a part type no role of OpenAI's knows, such as vLLM's
# `video_url`, is a vendor's and passes on).
_PART_FIELDS = {"text": "text", "image_url": "image_url", "input_audio": "input_audio", "file": "file", "refusal": "refusal"}
_USER_ONLY = {"image_url": "Image URLs", "input_audio": "Audio inputs", "file": "Files"}
_CONTENT_REQUIRED = frozenset({"system", "developer", "user", "tool"})


def check_message(message: Mapping[str, Any], index: int) -> None:
    """A message's content as OpenAI checks it (its role is already checked); a string content's
    length is checked by the caller, on the hot path."""
    role, content = message.get("role"), message.get("content")
    where = f"messages[{index}]"
    if content is None:
        if role in _CONTENT_REQUIRED:
            raise _invalid(f"Missing required parameter: '{where}.content'.", f"{where}.content", "missing_required_parameter")
        if role == "assistant" and not message.get("tool_calls") and not message.get("function_call"):
            raise _invalid(f"Invalid '{where}': an assistant message needs 'content' or 'tool_calls'.", f"{where}.content",
                           "missing_required_parameter")
    elif content.__class__ is list:
        if not content:
            raise _invalid(f"Invalid '{where}.content': empty array. Expected an array with minimum length 1, but got an empty array "
                           "instead.", f"{where}.content", "empty_array")
        for number, part in enumerate(content):
            _check_part(part, role, f"{where}.content[{number}]", where)
    elif content.__class__ is not str:
        raise _invalid(f"Invalid type for '{where}.content': expected a string or an array of content parts.", f"{where}.content",
                       "invalid_type")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise _invalid(f"Missing required parameter: '{where}.tool_call_id'.", f"{where}.tool_call_id", "missing_required_parameter")


def _check_part(part: Any, role: Any, where: str, message: str) -> None:
    if part.__class__ is not dict:
        raise _invalid(f"Invalid type for '{where}': expected an object.", where, "invalid_type")
    kind = part.get("type")
    if not isinstance(kind, str):
        raise _invalid(f"Missing required parameter: '{where}.type'.", f"{where}.type", "missing_required_parameter")
    field = _PART_FIELDS.get(kind)
    if field is None:
        return  # a vendor's part type
    if kind in _USER_ONLY and role != "user":
        raise _invalid(f"Invalid '{message}'. {_USER_ONLY[kind]} are only allowed for messages with role 'user', but this message "
                       f"with role '{role}' contains {'an image URL' if kind == 'image_url' else 'one'}.", message)
    if kind == "refusal" and role != "assistant":
        raise _invalid(f"Invalid '{message}'. Refusals are only allowed for messages with role 'assistant', but this message with "
                       f"role '{role}' contains one.", message)
    value = part.get(field)
    if value is None:
        raise _invalid(f"Missing required parameter: '{where}.{field}'.", f"{where}.{field}", "missing_required_parameter")
    if kind in ("text", "refusal"):
        if not isinstance(value, str):
            raise _invalid(f"Invalid type for '{where}.{field}': expected a string, but got {type(value).__name__} instead.",
                           f"{where}.{field}", "invalid_type")
    elif not isinstance(value, dict):
        raise _invalid(f"Invalid type for '{where}.{field}': expected an object, but got {type(value).__name__} instead.",
                       f"{where}.{field}", "invalid_type")
    elif kind == "image_url" and not isinstance(value.get("url"), str):
        raise _invalid(f"Missing required parameter: '{where}.image_url.url'.", f"{where}.image_url.url", "missing_required_parameter")
