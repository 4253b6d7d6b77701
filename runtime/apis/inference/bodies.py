"""The inference API's request bodies: checked as OpenAI checks them, before any provider sees
them, and declared as the OpenAPI document shows them (the routes read the bytes themselves)."""

from __future__ import annotations

from typing import Any

from contract.checks import MAX_STRING, validate_metadata
from contract.errors import InvalidRequestError
from runtime.apis.common import json_body
from runtime.apis.inference.chat_schema import CHAT_BODY
from runtime.apis.inference.checks import COMMON_SHAPES, SHAPES, check_message, json_type_name

__all__ = ["CHAT_BODY", "COMPLETIONS_BODY", "EMBEDDINGS_BODY", "check_chat_body", "check_completions_body", "check_embeddings_body"]

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")

COMPLETIONS_BODY = json_body(["model", "prompt"], {
    "model": {"type": "string", "description": "provider_id/model, a bare model name, or a registered model id"},
    "prompt": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}},
                         {"type": "array", "minItems": 1, "items": {"type": "integer"}},
                         {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": {"type": "integer"}}}]},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"]},
    "echo": {"type": ["boolean", "null"]},
    "suffix": {"type": ["string", "null"]},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
    "best_of": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
    "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 5},
    "max_tokens": {"type": ["integer", "null"], "minimum": 0},
})
EMBEDDINGS_BODY = json_body(["model", "input"], {
    "model": {"type": "string"},
    "input": {"oneOf": [{"type": "string"}, {"type": "array"}]},
    "encoding_format": {"type": "string", "enum": ["float", "base64"]},
    "dimensions": {"type": "integer", "minimum": 1},
})


def check_chat_body(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("Invalid 'messages': expected a non-empty array of messages.", param="messages", code="invalid_value")
    for index, message in enumerate(messages):
        if message.__class__ is not dict:
            raise InvalidRequestError(f"Invalid type for 'messages[{index}]': expected an object.", param=f"messages[{index}]",
                                      code="invalid_type")
        if message.get("role") not in _ROLES:
            raise InvalidRequestError(
                f"Invalid value for 'messages[{index}].role': {str(message.get('role'))[:40]!r} (expected one of: {', '.join(_ROLES)}).",
                param=f"messages[{index}].role", code="invalid_value")
        content = message.get("content")
        if content.__class__ is str:
            if len(content) > MAX_STRING:
                raise InvalidRequestError(
                    f"Invalid 'messages[{index}].content': string too long. Expected a string with maximum length {MAX_STRING}, but got "
                    f"a string with length {len(content)} instead.", param=f"messages[{index}].content", code="string_above_max_length")
            if message["role"] == "tool" and message.get("tool_call_id").__class__ is not str:
                check_message(message, index)
        else:  # parts, or none: the rarer shapes, checked in full
            check_message(message, index)
    for flag in ("stream", "store"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise InvalidRequestError(f"Invalid type for '{flag}': expected a boolean.", param=flag, code="invalid_type")
    for name in _NUMBERS.keys() & body.keys():  # usually one or two keys: a set intersection, no loop over all
        _check_number(name, body[name])
    for name in SHAPES.keys() & body.keys():
        SHAPES[name](body[name], body)
    if body.get("store") is True:
        validate_metadata(body.get("metadata"))


def check_completions_body(body: dict[str, Any]) -> None:
    """OpenAI's checks of a legacy completions request, before any provider sees it."""
    if "prompt" not in body or body["prompt"] is None:
        raise InvalidRequestError("Missing required parameter: 'prompt'.", param="prompt", code="missing_required_parameter")
    prompt = body["prompt"]
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt and (
            all(isinstance(item, str) for item in prompt) or all(_is_token(item) for item in prompt)
            or all(isinstance(item, list) and item and all(_is_token(token) for token in item) for item in prompt)))):
        raise InvalidRequestError("Invalid 'prompt': expected a string, an array of strings, an array of tokens, or an array of "
                                  "token arrays (none of them empty).", param="prompt", code="invalid_value")
    for flag in ("stream", "echo"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise InvalidRequestError(f"Invalid type for '{flag}': expected a boolean.", param=flag, code="invalid_type")
    if body.get("suffix") is not None and not isinstance(body["suffix"], str):
        raise InvalidRequestError("Invalid type for 'suffix': expected a string.", param="suffix", code="invalid_type")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise InvalidRequestError("Invalid type for 'stream_options': expected an object.", param="stream_options", code="invalid_type")
    for name in _TEXT_NUMBERS.keys() & body.keys():
        _check_number(name, body[name], _TEXT_NUMBERS)
    for name in COMMON_SHAPES.keys() & body.keys():
        COMMON_SHAPES[name](body[name], body)
    best_of, n = body.get("best_of"), body.get("n")
    if isinstance(best_of, int) and best_of < (n if isinstance(n, int) else 1):
        raise InvalidRequestError("Invalid 'best_of': it must be at least 'n'.", param="best_of", code="invalid_value")
    if body.get("stream") is True and isinstance(best_of, int) and best_of > (n if isinstance(n, int) else 1):
        raise InvalidRequestError("Invalid 'best_of': a stream cannot be given with 'best_of' greater than 'n'.", param="best_of",
                                  code="invalid_value")


def check_embeddings_body(body: dict[str, Any]) -> None:
    """OpenAI's own checks of an embeddings request, made before any provider sees it: an empty
    text would be embedded as a zero vector by some models (no direction: no similarity to
    anything), and an unknown encoding read as floats."""
    if "input" not in body:
        raise InvalidRequestError("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    texts = body["input"]
    if texts == "" or texts == []:
        raise InvalidRequestError("Invalid 'input': expected a non-empty string or a non-empty array.", param="input", code="invalid_value")
    if isinstance(texts, list):
        for index, text in enumerate(texts):
            if text == "" or text == []:
                raise InvalidRequestError(f"Invalid 'input[{index}]': expected a non-empty string or array of tokens.",
                                          param=f"input[{index}]", code="invalid_value")
    encoding = body.get("encoding_format")
    if encoding is not None and encoding not in ("float", "base64"):
        raise InvalidRequestError(f"Invalid value: {str(encoding)[:40]!r}. Supported values are: 'float' and 'base64'.",
                                  param="encoding_format", code="invalid_value")


# The standard numeric parameters: (integer?, minimum, maximum), OpenAI's bounds. Checked here so a
# mistake gets OpenAI's 400 whatever the upstream would have done with it (some clamp silently).
_NUMBERS: dict[str, tuple[bool, float, float | None]] = {
    "temperature": (False, 0, 2), "top_p": (False, 0, 1), "presence_penalty": (False, -2, 2), "frequency_penalty": (False, -2, 2),
    "n": (True, 1, 128), "max_tokens": (True, 1, None), "max_completion_tokens": (True, 1, None), "top_logprobs": (True, 0, 20),
}


# The legacy completions API's own bounds (`max_tokens` may be 0 there: with `echo`, the prompt alone).
_TEXT_NUMBERS: dict[str, tuple[bool, float, float | None]] = {
    **{name: _NUMBERS[name] for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "n")},
    "max_tokens": (True, 0, None), "best_of": (True, 0, 20), "logprobs": (True, 0, 5),
}


def _check_number(name: str, value: Any, bounds: dict[str, tuple[bool, float, float | None]] = _NUMBERS) -> None:
    if value is None:
        return
    integer, low, high = bounds[name]
    kind = "integer" if integer else "decimal"
    if value.__class__ is not int and (integer or value.__class__ is not float):
        got = json_type_name(value)
        raise InvalidRequestError(f"Invalid type for '{name}': expected {'an' if integer else 'a'} {kind}, but got {got} instead.",
                                  param=name, code="invalid_type")
    if value < low:
        raise InvalidRequestError(f"Invalid '{name}': {kind} below minimum value. Expected a value >= {low:g}, but got {value} instead.",
                                  param=name, code=f"{kind}_below_min_value")
    if high is not None and value > high:
        raise InvalidRequestError(f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high:g}, but got {value} instead.",
                                  param=name, code=f"{kind}_above_max_value")


def _is_token(value: Any) -> bool:
    return value.__class__ is int
