"""The chat completions body as the OpenAPI document declares it: what `check_chat_body` and the
shape checks of `runtime.apis.inference.checks` refuse, and nothing they take, so that a request
the document declares valid is one the route passes on (issue 45). Fields the route does not
check are forwarded to the upstream, which checks them (`additionalProperties`)."""

from __future__ import annotations

from typing import Any

from contract.checks import MAX_STRING
from runtime.apis.common import METADATA_SCHEMA, json_body

__all__ = ["CHAT_BODY"]

_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$", "examples": ["get_weather"]}
_PRESENT: dict[str, Any] = {"not": {"enum": [None, False, 0, "", [], {}]}}  # what Python reads as true


def _part(kind: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "title": kind, "required": ["type", kind], "properties": {"type": {"const": kind}, kind: value}}


_PARTS = {
    "text": _part("text", {"type": "string"}),
    "image_url": _part("image_url", {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}),
    "input_audio": _part("input_audio", {"type": "object"}),
    "file": _part("file", {"type": "object"}),
    "refusal": _part("refusal", {"type": "string"}),
}
_VENDOR_PART = {"type": "object", "title": "a vendor's part", "required": ["type"], "description": "a part type of the upstream's, passed on",
                "properties": {"type": {"type": "string", "not": {"enum": list(_PARTS)}}}}


def _content(*kinds: str, nullable: bool = False) -> dict[str, Any]:
    """A message's content: a string, or the parts its role may send (image, audio and file parts
    are the user's, refusals the assistant's)."""
    parts = {"type": "array", "minItems": 1, "items": {"oneOf": [*(_PARTS[kind] for kind in kinds), _VENDOR_PART]}}
    return {"anyOf": [{"type": "string", "maxLength": MAX_STRING}, parts, *([{"type": "null"}] if nullable else [])]}


def _message(roles: list[str], content: dict[str, Any], *, required: tuple[str, ...] = ("content",), **more: Any) -> dict[str, Any]:
    return {"type": "object", "title": "/".join(roles), "required": ["role", *required],
            "properties": {"role": {"enum": roles}, "content": content, **more}}


_MESSAGE = {"oneOf": [
    _message(["system", "developer"], _content("text")),
    _message(["user"], _content("text", "image_url", "input_audio", "file")),
    {**_message(["assistant"], _content("text", "refusal", nullable=True), required=(), tool_calls={"type": ["array", "null"]},
                function_call={"type": ["object", "null"]}),
     "anyOf": [{"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
               {"required": ["tool_calls"], "properties": {"tool_calls": _PRESENT}},
               {"required": ["function_call"], "properties": {"function_call": _PRESENT}}],
     "description": "`content`, or the calls it made (`tool_calls`, `function_call`)"},
    _message(["tool"], _content("text"), required=("content", "tool_call_id"), tool_call_id={"type": "string"}),
    _message(["function"], _content("text", nullable=True), required=()),
]}

_TOOL = {"oneOf": [
    {"type": "object", "title": "function", "required": ["type", "function"], "properties": {"type": {"const": "function"}, "function": {
        "type": "object", "required": ["name"], "properties": {"name": _NAME, "parameters": {"type": ["object", "null"]}}}}},
    {"type": "object", "title": "custom", "required": ["type", "custom"], "properties": {"type": {"const": "custom"}, "custom": {
        "type": "object", "required": ["name"], "properties": {"name": _NAME}}}},
]}


def _named_choice(kind: str) -> dict[str, Any]:
    return {"type": "object", "required": ["type", kind], "properties": {"type": {"const": kind}, kind: {
        "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}


_TOOL_CHOICE = {"anyOf": [
    {"enum": ["none", "auto", "required", None]}, _named_choice("function"), _named_choice("custom"),
    {"type": "object", "required": ["type"], "properties": {"type": {"const": "allowed_tools"}}},
], "description": "anything but `none` needs `tools`"}

_RESPONSE_FORMAT = {"anyOf": [
    {"type": "null"},
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"], "properties": {"type": {"const": "json_schema"}, "json_schema": {
        "type": "object", "required": ["name"], "properties": {"name": _NAME, "schema": {"type": ["object", "null"]}}}}},
]}


def _number(low: float, high: float | None = None, *, integer: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["integer" if integer else "number", "null"], "minimum": low}
    if high is not None:
        schema["maximum"] = high
    return schema


# The numeric bounds are bodies._NUMBERS', which the route checks.
CHAT_BODY = json_body(["model", "messages"], {
    "model": {"type": "string", "minLength": 1, "description": "provider_id/model, a bare model name, or a registered model id"},
    "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
    "stream": {"type": ["boolean", "null"]},
    "store": {"type": ["boolean", "null"], "description": "keep the completion for GET /v1/chat/completions"},
    "metadata": {"type": ["object", "null"], "description": "with `store: true`, at most 16 string pairs (keys up to 64 characters, "
                                                             "values up to 512); without it, passed on"},
    "tools": {"type": "array", "items": _TOOL},
    "tool_choice": _TOOL_CHOICE,
    "response_format": _RESPONSE_FORMAT,
    "modalities": {"type": ["array", "null"], "items": {"enum": ["text", "audio"]}},
    "stop": {"anyOf": [{"type": ["string", "null"]}, {"type": "array", "items": {"type": "string"}}]},
    "seed": {"type": ["integer", "null"]},
    "logit_bias": {"type": ["object", "null"], "propertyNames": {"pattern": "^[0-9]+$"},
                   "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
    "user": {"type": ["string", "null"]},
    "stream_options": {"type": ["object", "null"]},
    "temperature": _number(0, 2), "top_p": _number(0, 1), "presence_penalty": _number(-2, 2), "frequency_penalty": _number(-2, 2),
    "n": _number(1, 128, integer=True), "max_tokens": _number(1, integer=True), "max_completion_tokens": _number(1, integer=True),
    "top_logprobs": _number(0, 20, integer=True),
}, rules=[
    {"if": {"required": ["store"], "properties": {"store": {"const": True}}}, "then": {"properties": {"metadata": METADATA_SCHEMA}}},
    {"if": {"required": ["tool_choice"], "properties": {"tool_choice": {"not": {"enum": [None, "none"]}}}},
     "then": {"required": ["tools"], "properties": {"tools": {"minItems": 1}}}},
])
