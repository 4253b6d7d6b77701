"""Chat completion messages as Anthropic Messages input (pure functions).

System and developer messages become the `system` blocks, in order; the rest alternate user and
assistant as Anthropic requires: consecutive messages of one role are merged, tool messages become
`tool_result` blocks of a user turn (first in it, in their order), an assistant's tool calls
`tool_use` blocks with their arguments parsed, and its thinking goes back as the signed blocks it came
as (`providers/inference/anthropic/thinking.py`). A `cache_control` a client put on a message or a
content part is kept on the block it becomes."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract.errors import InvalidRequestError

__all__ = ["Recall", "anthropic_messages", "without_thinking"]

Block = dict[str, Any]
Recall = Callable[[Mapping[str, Any]], Sequence[Mapping[str, str]]]
"""The thinking blocks to hand back with an assistant message."""

_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def anthropic_messages(messages: Sequence[Any], recall: Recall) -> tuple[list[Block], list[dict[str, Any]]]:
    """(system blocks, messages) for a chat request's `messages`."""
    system: list[Block] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        where = f"messages[{index}]"
        if role in ("system", "developer"):
            system += _with_cache(message, _text_blocks(message.get("content"), where))
        elif role == "user":
            _append(turns, "user", _with_cache(message, _user_blocks(message.get("content"), where)))
        elif role == "assistant":
            _append(turns, "assistant", _with_cache(message, _assistant_blocks(message, where, recall)))
        elif role == "tool":
            _append(turns, "user", _with_cache(message, [_tool_result(message, where)]))
        else:
            raise InvalidRequestError(f"Invalid value for '{where}.role': {role!r} is not a role Anthropic's models take "
                                      "(system, developer, user, assistant, tool).", param=f"{where}.role", code="unsupported_value")
    for turn in turns:  # tool results first in their turn, thinking first in its: as Anthropic requires
        first = ("tool_result",) if turn["role"] == "user" else ("thinking", "redacted_thinking")
        turn["content"].sort(key=lambda block: block["type"] not in first)
    return system, turns


def without_thinking(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with no thinking blocks, for a request with thinking off (Anthropic refuses a last
    assistant turn that holds some then); a turn left empty goes, and its neighbours merge."""
    kept: list[dict[str, Any]] = []
    for turn in turns:
        _append(kept, turn["role"], [block for block in turn["content"] if block["type"] not in ("thinking", "redacted_thinking")])
    return kept


def _append(turns: list[dict[str, Any]], role: str, blocks: list[Block]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"] += blocks
    else:
        turns.append({"role": role, "content": blocks})


def _with_cache(message: Mapping[str, Any], blocks: list[Block]) -> list[Block]:
    cache = message.get("cache_control")
    if isinstance(cache, dict) and blocks:
        blocks[-1] = {**blocks[-1], "cache_control": cache}
    return blocks


def _text_blocks(content: Any, where: str) -> list[Block]:
    """The text of a system, developer or tool message (a string, or text parts)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for position, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, Mapping) or part.get("type") != "text":
            raise _unsupported(f"{where}.content[{position}]", "this message takes text parts only")
        if part.get("text"):
            blocks.append(_cached(part, {"type": "text", "text": str(part["text"])}))
    return blocks


def _user_blocks(content: Any, where: str) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for position, part in enumerate(content if isinstance(content, list) else ()):
        block = _user_part(part, f"{where}.content[{position}]")
        if block is not None:
            blocks.append(_cached(part, block))
    return blocks


def _user_part(part: Mapping[str, Any], where: str) -> Block | None:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": str(part["text"])} if part.get("text") else None
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url")
        return {"type": "image", "source": _image_source(str(url or ""), where)}
    if kind == "file":
        return _document(part.get("file") or {}, where)
    raise _unsupported(where, f"Anthropic's models take no '{kind}' parts")


def _cached(part: Mapping[str, Any], block: Block) -> Block:
    cache = part.get("cache_control")
    return {**block, "cache_control": cache} if isinstance(cache, dict) else block


def _image_source(url: str, where: str) -> dict[str, Any]:
    if url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    media_type, data = _data_url(url, f"{where}.image_url.url")
    if media_type not in _IMAGE_TYPES:
        raise _unsupported(f"{where}.image_url.url", f"an image of type '{media_type}' (Anthropic takes {', '.join(_IMAGE_TYPES)})")
    return {"type": "base64", "media_type": media_type, "data": data}


def _document(file: Mapping[str, Any], where: str) -> Block:
    data = file.get("file_data")
    if not isinstance(data, str) or not data:
        raise _unsupported(f"{where}.file", "a file named by id: Anthropic takes a file's content (file_data) or its URL")
    if data.startswith(("http://", "https://")):
        block: Block = {"type": "document", "source": {"type": "url", "url": data}}
    else:
        media_type, encoded = _data_url(data, f"{where}.file.file_data") if data.startswith("data:") else ("application/pdf", data)
        if media_type == "application/pdf":
            block = {"type": "document", "source": {"type": "base64", "media_type": media_type, "data": encoded}}
        elif media_type.startswith("text/"):
            text = _decoded(encoded, f"{where}.file.file_data").decode("utf-8", errors="replace")
            block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
        else:
            raise _unsupported(f"{where}.file.file_data", f"a file of type '{media_type}' (Anthropic reads PDF and text documents)")
    if isinstance(file.get("filename"), str) and file["filename"]:
        block["title"] = file["filename"]
    return block


def _data_url(url: str, param: str) -> tuple[str, str]:
    head, comma, data = url.partition(",")
    if not url.startswith("data:") or not comma or not head.endswith(";base64"):
        raise InvalidRequestError(f"Invalid value for '{param}': expected an http(s) URL or a base64 data URL "
                                  "(data:<type>;base64,...).", param=param, code="invalid_value")
    return head[5:-7].lower(), data


def _decoded(data: str, param: str) -> bytes:
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"Invalid value for '{param}': not valid base64.", param=param, code="invalid_value") from None


def _assistant_blocks(message: Mapping[str, Any], where: str, recall: Recall) -> list[Block]:
    blocks: list[Block] = [dict(block) for block in recall(message)]
    content = message.get("content")
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    for position, part in enumerate(content if isinstance(content, list) else ()):
        text = part.get("text") if part.get("type") == "text" else part.get("refusal") if part.get("type") == "refusal" else None
        if text is None:
            raise _unsupported(f"{where}.content[{position}]", "an assistant message takes text and refusal parts only")
        if text:
            blocks.append(_cached(part, {"type": "text", "text": str(text)}))
    if isinstance(message.get("refusal"), str) and message["refusal"] and not content:
        blocks.append({"type": "text", "text": message["refusal"]})
    for position, call in enumerate(message.get("tool_calls") or ()):
        blocks.append(_tool_use(call, f"{where}.tool_calls[{position}]"))
    return blocks


def _tool_use(call: Mapping[str, Any], where: str) -> Block:
    if call.get("type", "function") != "function":
        raise _unsupported(f"{where}.type", f"a '{call.get('type')}' tool call (Anthropic's tools are functions)")
    function = call.get("function") or {}
    arguments = function.get("arguments") or "{}"
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidRequestError(f"Invalid value for '{where}.function.arguments': Anthropic takes a tool call's arguments as "
                                  "a JSON object.", param=f"{where}.function.arguments", code="invalid_value")
    return {"type": "tool_use", "id": str(call.get("id") or ""), "name": str(function.get("name") or ""), "input": parsed}


def _tool_result(message: Mapping[str, Any], where: str) -> Block:
    content = message.get("content")
    result: Any = content if isinstance(content, str) else _text_blocks(content, where)
    return {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""), "content": result}


def _unsupported(param: str, what: str) -> InvalidRequestError:
    return InvalidRequestError(f"Unsupported value for '{param}': {what}.", param=param, code="unsupported_value")
