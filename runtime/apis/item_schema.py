"""The JSON Schema of a Responses or Conversations item a client sends, for the OpenAPI document:
what `contract.items.normalize_item` checks, no more and no less, so that a request the document
declares valid is one the server takes (issue 45).

An item is one of its types (`type`; a message may leave it out); each type lists the fields its
check requires, and a message's content parts theirs. Fields the check does not read are left open
(`additionalProperties`): the server keeps them as sent. What the document cannot say is in the
descriptions: that encrypted content must be sealed by this server, that an `item_reference` names
a stored item, and that a tool's output follows its call (checks of the Responses routes). The item
and part types are `contract.items`' own tables, so that a type added there is in the document.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contract.items import _CLIENT_CALL_TYPES, _PART_TYPES, _PASSIVE_TYPES

__all__ = ["IMAGE_URL_PATTERN", "item_schema"]

_NULLABLE_TEXT = {"type": ["string", "null"]}


def _ci(text: str) -> str:
    """`text` as a case-insensitive regular expression (JSON Schema's dialect has no flag for it)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in text)


_BASE64 = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"
IMAGE_URL_PATTERN = (f"^(?:https?://|data:{_ci('image/')}(?:{'|'.join(_ci(kind) for kind in ('png', 'jpeg', 'jpg', 'gif', 'webp'))})"
                     f";base64,{_BASE64}$)")
"""An image the model can be given: an http(s) URL, or a PNG, JPEG, GIF or WebP as a base64 data URL."""


def _part(kind: str) -> dict[str, Any]:
    fields = _PART_TYPES[kind]
    schema: dict[str, Any] = {"type": "object", "required": ["type", *fields],
                              "properties": {"type": {"const": kind}, **{field: {"type": "string"} for field in fields}}}
    if kind == "input_image":
        schema["properties"].update(image_url={"type": ["string", "null"], "pattern": IMAGE_URL_PATTERN,
                                               "examples": ["https://example.com/cat.png"]},
                                    file_id=_NULLABLE_TEXT, detail=_NULLABLE_TEXT)
        schema["anyOf"] = [{"required": ["image_url"], "properties": {"image_url": {"type": "string"}}},
                           {"required": ["file_id"], "properties": {"file_id": {"type": "string", "minLength": 1}}}]
    elif kind == "input_file":
        schema["properties"].update(file_id=_NULLABLE_TEXT, file_data=_NULLABLE_TEXT, file_url=_NULLABLE_TEXT, filename=_NULLABLE_TEXT)
    return schema


def _parts(kinds: Iterable[str]) -> dict[str, Any]:
    return {"type": "array", "items": {"oneOf": [_part(kind) for kind in kinds]}}


_MESSAGE_BASE = {"type": {"const": "message"}, "id": _NULLABLE_TEXT, "status": _NULLABLE_TEXT}


def _messages() -> list[dict[str, Any]]:
    content = {"anyOf": [{"type": "string"}, _parts(_PART_TYPES)]}
    return [
        {"type": "object", "title": "Message", "required": ["role", "content"], "description": "`type` may be left out",
         "properties": {**_MESSAGE_BASE, "role": {"enum": ["user", "system", "developer"]}, "content": content}},
        {"type": "object", "title": "Assistant message", "required": ["role", "content"], "description": "`type` may be left out",
         "properties": {**_MESSAGE_BASE, "role": {"const": "assistant"}, "content": content,
                        "phase": {"enum": ["commentary", "final_answer", None]}}},
    ]


def _typed(kind: str, title: str, required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {"type": "object", "title": title, "required": ["type", *required],
            "properties": {"type": {"const": kind}, "id": _NULLABLE_TEXT, **properties}}


def _with_text(description: str) -> dict[str, Any]:
    return {"type": ["array", "null"], "description": description,
            "items": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}


# What each client-tool item's required fields hold (OpenAI's types; the check asks only that each is there).
_PRESENT = {"not": {"type": "null"}}
_CLIENT_FIELDS = {"call_id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "string"}, "operation": {"type": "object"},
                  "status": {"type": "string"}, "action": {"type": "object"}, "output": _PRESENT, "id": {"type": "string"},
                  "arguments": _PRESENT, "tools": {"type": "array"}}


def item_schema(*, response: bool) -> dict[str, Any]:
    """One item of a response's input (`response`), or one a conversation stores. A response's may
    be an `item_reference` to a stored item (a conversation stores none), and its encrypted content
    is read back by this server, so a compaction item must carry it."""
    output = {"anyOf": [{"type": "string"}, _parts(("input_text", "input_image", "input_file"))]}
    sealed_note = "a token this server sealed (any other is a 400 invalid_encrypted_content)" if response else "kept as sent"
    branches = [
        *_messages(),
        _typed("function_call", "Function call", ("call_id", "name", "arguments"), call_id={"type": "string"}, name={"type": "string"},
               arguments={"type": "string"}, status=_NULLABLE_TEXT),
        _typed("function_call_output", "Function call output", ("call_id", "output"), call_id={"type": "string"}, output=output,
               status=_NULLABLE_TEXT),
        _typed("reasoning", "Reasoning", summary=_with_text("summary_text parts"), content=_with_text("reasoning_text parts"),
               encrypted_content={"type": ["string", "null"], "description": sealed_note}),
        *(_typed(kind, kind, required, **{field: _CLIENT_FIELDS[field] for field in required})
          for kind, (_, required) in _CLIENT_CALL_TYPES.items()),
    ]
    if response:
        for branch in branches:
            if branch["properties"]["type"].get("const") in ("function_call_output", "custom_tool_call_output"):
                branch["description"] = "after the call it answers (the same call_id) in the context or the input, else a 400 (not on /compact)"
    passive = sorted(_PASSIVE_TYPES)
    if response:
        passive.remove("compaction")
        branches.append(_typed("compaction", "Compaction", ("encrypted_content",),
                               encrypted_content={"type": "string", "description": sealed_note}))
    branches.append({"type": "object", "title": "Hosted tool item", "required": ["type"], "properties": {"type": {"enum": passive}},
                     "description": "an item of a server-side tool or hosted feature, kept as context"})
    if response:
        branches.append({"type": "object", "title": "Item reference", "required": ["type", "id"],
                         "properties": {"type": {"const": "item_reference"}, "id": {"type": "string"}},
                         "description": "a stored item, by its id (one not found is a 404)"})
    return {"oneOf": branches}
