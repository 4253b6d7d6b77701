"""Responses and Conversations items: checked and normalised to their full form, with ids.

Pure functions: no I/O. Both APIs share the OpenAI item shapes, so both check input here.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any

from contract import fastjson
from contract.errors import InvalidRequestError
from contract.ids import random_hex

__all__ = ["INCLUDABLE", "INCLUDED_ONLY", "ItemText", "check_include", "new_id", "normalize_input", "normalize_item", "shown_item", "shown_items"]

_INPUT_ROLES = ("user", "system", "developer", "assistant")
_PART_TYPES = {
    "input_text": ("text",),
    "input_image": (),
    "input_file": (),
    "output_text": ("text",),
    "refusal": ("refusal",),
    "reasoning_text": ("text",),
    "summary_text": ("text",),
}
_OUTPUT_PART_TYPES = ("input_text", "input_image", "input_file")
# Items of server-side tools and other hosted features, by the id prefix an item of the type gets
# when the client sent it without one: kept and replayed as context (their tool runtime reads them).
_PASSIVE_TYPES = {
    "web_search_call": "ws", "file_search_call": "fs", "mcp_call": "mcp", "mcp_list_tools": "mcpl",
    "mcp_approval_request": "mcpr", "mcp_approval_response": "mcpa", "computer_call": "cu",
    "computer_call_output": "cuo", "code_interpreter_call": "ci", "image_generation_call": "ig",
    "compaction": "cmp",
}
# The items of tools the client runs (besides functions): the id prefix of each, and what it must hold.
_CLIENT_CALL_TYPES = {
    "custom_tool_call": ("ctc", ("call_id", "name", "input")), "custom_tool_call_output": ("ctco", ("call_id", "output")),
    "apply_patch_call": ("apc", ("call_id", "operation")), "apply_patch_call_output": ("apco", ("call_id", "status")),
    "shell_call": ("sh", ("call_id", "action")), "shell_call_output": ("sho", ("call_id", "output")),
    "local_shell_call": ("lsh", ("call_id", "action")),
    "local_shell_call_output": ("lsho", ("id", "output")),  # names its call by `id` (the call's call_id)
    "tool_search_call": ("tsc", ("arguments",)), "tool_search_output": ("tso", ("tools",)),
}


# What `include` may ask for (openai.types.responses.ResponseIncludable); the ones of tools that do
# not run here are accepted and add nothing, as when OpenAI has nothing of the kind to include.
INCLUDABLE = ("file_search_call.results", "web_search_call.results", "web_search_call.action.sources", "message.input_image.image_url",
              "computer_call_output.output.image_url", "code_interpreter_call.outputs", "reasoning.encrypted_content",
              "message.output_text.logprobs")

INCLUDED_ONLY: dict[str, tuple[tuple[tuple[str, ...], str | None], ...]] = {
    "file_search_call": ((("results",), "file_search_call.results"),),
    "web_search_call": ((("action", "sources"), "web_search_call.action.sources"), (("action", "text"), None)),
    "code_interpreter_call": ((("outputs",), "code_interpreter_call.outputs"), (("files",), None), (("note",), None)),
}
"""Item fields (paths into the item) shown only when `include` asks for the value beside them, or
never (None: what a tool read for the model, kept for the model alone). OpenAI keeps such fields
and shows them on request; the stored item keeps them always, so a chain or conversation
continued later gives the model what it read."""


def check_include(values: Iterable[str]) -> frozenset[str]:
    """`include` values, each one OpenAI knows (a 400 naming the first that is not)."""
    for index, value in enumerate(values):
        if value not in INCLUDABLE:
            raise InvalidRequestError(f"Invalid value: {value[:80]!r}. Supported values are: {', '.join(INCLUDABLE)}.",
                                      param=f"include[{index}]", code="invalid_value")
    return frozenset(values)


def shown_item(item: Any, include: frozenset[str]) -> Any:
    """The item as the client asked to see it: a copy without the fields `include` did not ask for."""
    gates = INCLUDED_ONLY.get(str(item.get("type"))) if isinstance(item, dict) else None
    if gates is None:
        return item
    shown = item
    for path, asked in gates:
        if asked is not None and asked in include:
            continue
        holder = shown
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if not isinstance(holder, dict) or path[-1] not in holder or (asked is not None and holder[path[-1]] is None):
            continue
        shown = _without(shown, list(path), remove=asked is None)
    return shown


def _without(item: dict[str, Any], path: list[str], remove: bool) -> dict[str, Any]:
    """A copy of `item` with the field at `path` shown as null, or left out (the rest shared)."""
    head, *rest = path
    if rest:
        return {**item, head: _without(item[head], rest, remove)}
    if remove:
        return {key: value for key, value in item.items() if key != head}
    return {**item, head: None}


class ItemText:
    """An item as the JSON text its store keeps, with its id. A page of items read as text is
    written out by joining the texts (`runtime.apis.common.JSONBytes`): parsing 100 items and
    writing them again cost 140 µs, more than the rest of listing them."""

    __slots__ = ("id", "text")

    def __init__(self, item_id: str, text: str) -> None:
        self.id = item_id
        self.text = text

    def parsed(self) -> dict[str, Any]:
        item = fastjson.loads(self.text)
        if not isinstance(item, dict):
            raise ValueError(f"item {self.id!r} is not stored as a JSON object")
        return item


# Every item of a type with fields to leave out has the type's name, as a JSON string, in its text.
_GATED_TEXT = re.compile("|".join(re.escape(f'"{item_type}"') for item_type in sorted(INCLUDED_ONLY)))


def _has_gated_fields(item: Any) -> bool:
    if item.__class__ is ItemText:
        return _GATED_TEXT.search(item.text) is not None
    return item.__class__ is dict and item.get("type") in INCLUDED_ONLY


def shown_items(items: list[Any], include: frozenset[str]) -> list[Any]:
    """`shown_item` of each; the list itself when no item has a field to leave out (the usual
    case). Items may be `ItemText`: those that may have such fields are parsed to be shown."""
    if not any(_has_gated_fields(item) for item in items):
        return items
    return [shown_item(item.parsed() if item.__class__ is ItemText else item, include) if _has_gated_fields(item) else item
            for item in items]


def new_id(prefix: str) -> str:
    return f"{prefix}_{random_hex(24)}"


def normalize_input(raw: Any) -> list[dict[str, Any]]:
    """The request's `input` as a list of full items, each with an id; 400 for anything malformed."""
    if isinstance(raw, str):
        return [_message("user", [{"type": "input_text", "text": raw}])]
    if not isinstance(raw, list):
        raise InvalidRequestError("Invalid type for 'input': expected a string or an array of input items.", param="input", code="invalid_type")
    return [normalize_item(item, f"input[{index}]") for index, item in enumerate(raw)]


def _message(role: str, content: list[dict[str, Any]], item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or new_id("msg"), "type": "message", "role": role, "content": content, "status": status}


def normalize_item(item: Any, where: str) -> dict[str, Any]:
    """One item in its full form; `where` names it in errors (e.g. `input[2]`)."""
    if not isinstance(item, Mapping):
        raise InvalidRequestError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
    kind = item.get("type", "message" if "role" in item else None)
    if not isinstance(kind, str):  # (a list or an object is no key of the tables below)
        raise InvalidRequestError(f"Invalid type for '{where}.type': expected a string.", param=f"{where}.type", code="invalid_type")
    if kind == "message":
        return _normalize_message(item, where)
    if kind == "function_call":
        _require(item, where, ("call_id", "name", "arguments"))
        return {"status": "completed", **item, "type": "function_call", "id": item.get("id") or new_id("fc")}
    if kind == "function_call_output":
        _require(item, where, ("call_id", "output"))
        return {"status": "completed", **item, "output": _normalize_output(item["output"], f"{where}.output"), "id": item.get("id") or new_id("fco")}
    if kind == "reasoning":
        _check_reasoning(item, where)
        return {"summary": [], **item, "id": item.get("id") or new_id("rs")}
    if kind == "item_reference":
        _require(item, where, ("id",))
        if not isinstance(item["id"], str):
            raise InvalidRequestError(f"Invalid type for '{where}.id': expected a string.", param=f"{where}.id", code="invalid_type")
        return {"type": "item_reference", "id": item["id"]}
    if kind in _CLIENT_CALL_TYPES:
        prefix, required = _CLIENT_CALL_TYPES[kind]
        _require(item, where, required)
        return {**item, "id": item.get("id") or new_id(prefix)}
    if kind in _PASSIVE_TYPES:
        return {**item, "id": item.get("id") or new_id(_PASSIVE_TYPES[kind])}
    raise InvalidRequestError(f"Invalid value for '{where}.type': unknown input item type {kind!r}.", param=f"{where}.type", code="invalid_value")


def _check_reasoning(item: Mapping[str, Any], where: str) -> None:
    """A reasoning item's `summary` (`summary_text` parts) and `content` (`reasoning_text` parts) are
    arrays of parts carrying text, and its `encrypted_content` a string, as OpenAI requires."""
    for field in ("summary", "content"):
        parts = item.get(field)
        if parts is None:
            continue
        if not isinstance(parts, list):
            raise InvalidRequestError(f"Invalid type for '{where}.{field}': expected an array.", param=f"{where}.{field}", code="invalid_type")
        for index, part in enumerate(parts):
            if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
                raise InvalidRequestError(f"Invalid '{where}.{field}[{index}]': expected an object with a string 'text'.",
                                          param=f"{where}.{field}[{index}]", code="invalid_value")
    if item.get("encrypted_content") is not None and not isinstance(item["encrypted_content"], str):
        raise InvalidRequestError(f"Invalid type for '{where}.encrypted_content': expected a string.", param=f"{where}.encrypted_content",
                                  code="invalid_type")


def _normalize_output(output: Any, where: str) -> Any:
    """A function's output: a string, or text, image and file parts (as OpenAI allows)."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        raise InvalidRequestError(f"Invalid type for '{where}': expected a string or an array of content parts.", param=where,
                                  code="invalid_type")
    parts = [_normalize_part(part, f"{where}[{index}]") for index, part in enumerate(output)]
    for index, part in enumerate(parts):
        if part["type"] not in _OUTPUT_PART_TYPES:
            raise InvalidRequestError(f"Invalid value for '{where}[{index}].type': expected one of: {', '.join(_OUTPUT_PART_TYPES)}.",
                                      param=f"{where}[{index}].type", code="invalid_value")
    return parts


def _require(item: Mapping[str, Any], where: str, keys: Iterable[str]) -> None:
    for key in keys:
        if item.get(key) is None:
            raise InvalidRequestError(f"Missing required parameter: '{where}.{key}'.", param=f"{where}.{key}", code="missing_required_parameter")


def _normalize_message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise InvalidRequestError(
            f"Invalid value for '{where}.role': expected one of {', '.join(_INPUT_ROLES)}, got {role!r}.", param=f"{where}.role", code="invalid_value"
        )
    content = item.get("content")
    text_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        parts = [{"type": text_type, "text": content, **({"annotations": []} if role == "assistant" else {})}]
    elif isinstance(content, list):
        parts = [_normalize_part(part, f"{where}.content[{index}]") for index, part in enumerate(content)]
    else:
        raise InvalidRequestError(f"Invalid type for '{where}.content': expected a string or an array of content parts.", param=f"{where}.content", code="invalid_type")
    message = _message(str(role), parts, item.get("id"), str(item.get("status") or "completed"))
    if role == "assistant" and item.get("phase") is not None:
        if item["phase"] not in ("commentary", "final_answer"):
            raise InvalidRequestError(f"Invalid value for '{where}.phase': expected 'commentary' or 'final_answer'.", param=f"{where}.phase",
                                      code="invalid_value")
        message["phase"] = item["phase"]  # kept as sent: agents read it back from stored items and chains
    return message


def _normalize_part(part: Any, where: str) -> dict[str, Any]:
    if not isinstance(part, Mapping):
        raise InvalidRequestError(f"Invalid type for '{where}': expected a content part object.", param=where, code="invalid_type")
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in _PART_TYPES:
        raise InvalidRequestError(
            f"Invalid value for '{where}.type': unknown content part type {kind!r} (expected one of: {', '.join(_PART_TYPES)}).",
            param=f"{where}.type", code="invalid_value",
        )
    for key in _PART_TYPES[kind]:
        if not isinstance(part.get(key), str):
            raise InvalidRequestError(f"Missing required parameter: '{where}.{key}'.", param=f"{where}.{key}", code="missing_required_parameter")
    if kind == "input_image":
        if not (part.get("image_url") or part.get("file_id")):
            raise InvalidRequestError(f"Missing required parameter: '{where}.image_url' (or file_id).", param=f"{where}.image_url",
                                      code="missing_required_parameter")
        if part.get("image_url"):
            _check_image_url(part["image_url"], f"{where}.image_url")
        return {"detail": "auto", **part}  # as OpenAI stores it (its SDK requires `detail`)
    if kind == "output_text":
        return {"annotations": [], **part}
    return dict(part)


_IMAGE_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp")


def _check_image_url(url: Any, where: str) -> None:
    """An image URL the model can be given, or OpenAI's code for what is wrong with it (checked here,
    so the client gets OpenAI's answer whatever the upstream would have said)."""
    if not isinstance(url, str):
        raise InvalidRequestError(f"Invalid type for '{where}': expected a URL string.", param=where, code="invalid_type")
    if url.startswith("data:"):
        header, comma, payload = url[5:].partition(",")
        media, _, encoding = header.partition(";")
        if not comma or encoding != "base64":
            raise InvalidRequestError(f"Invalid '{where}': a data URL must be base64 ('data:image/png;base64,...').", param=where,
                                      code="invalid_image_url")
        if media.lower() not in _IMAGE_TYPES:
            raise InvalidRequestError(f"Invalid '{where}': unsupported image type {media[:40]!r} (expected PNG, JPEG, GIF or WebP).",
                                      param=where, code="unsupported_image_media_type")
        if not payload:
            raise InvalidRequestError(f"Invalid '{where}': the image is empty.", param=where, code="empty_image_file")
        try:
            base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestError(f"Invalid '{where}': the image data is not valid base64.", param=where,
                                      code="invalid_base64_image") from None
        return
    if not url.startswith(("https://", "http://")):
        raise InvalidRequestError(f"Invalid '{where}': expected an http(s) URL or a base64 data URL, got {url[:40]!r}.", param=where,
                                  code="invalid_image_url")
