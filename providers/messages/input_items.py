"""A Messages request's `messages` as Responses input items (for a request with server tools,
`server_tools.py`). Pure: no I/O.

    consecutive messages of a role        one turn, as Anthropic merges them
    a user's tool_result blocks           `function_call_output` items (call_id: the tool_use_id; the text, or
                                          input parts when the result holds images or documents; `is_error` as an
                                          "Error: " heading), before the user's other content
    a user's other blocks                 a `user` message: text as input_text, images as input_image (base64 as a
                                          data URL, a URL, a file id), documents as input_file (a base64 PDF as
                                          file_data, a URL as file_url, a file id) or input_text (plain text and
                                          content sources), search results as input_text
    a system message in messages          a `system` message
    an assistant's text                   an `assistant` message (consecutive text blocks joined: the blocks a
                                          cited answer was split into read as the answer again)
    thinking, redacted_thinking           a `reasoning` item with the text (a redacted one's when `reveal` reads it)
    tool_use                              a `function_call` (call_id: the block's id)
    mcp_tool_use + mcp_tool_result        an `mcp_call` (id `mcp_` and the block id's tail, server_label, name,
                                          arguments, output, or error and status failed)
    server_tool_use web_search +          a `web_search_call` with its `search` action and sources (each result's
    web_search_tool_result                page as `open_result` reads its encrypted_content: the text the model
                                          read); an error result as a failed call
    server_tool_use of another tool       assistant text saying what was called (Responses has no item for it)

Each item's origin (the index of the message it came from) is kept, so that an error naming
`input[i]` names the message instead.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from providers.messages.parts import user_parts

__all__ = ["ResultOpener", "Reveal", "input_items"]

ResultOpener = Callable[[str], Mapping[str, Any] | None]
"""Reads a `web_search_result`'s encrypted_content back (url, title, text); None when it cannot."""

Reveal = Callable[[str], str | None]


def input_items(messages: list[dict[str, Any]], *, reveal: Reveal | None, open_result: ResultOpener) -> tuple[list[dict[str, Any]], list[int]]:
    """The items, and the index in `messages` each came from."""
    items: list[dict[str, Any]] = []
    origins: list[int] = []
    for role, run in itertools.groupby(enumerate(messages), key=lambda pair: str(pair[1]["role"])):
        group = list(run)
        if role == "system":
            made = [_message("system", _content(message["content"])) for _, message in group]
        else:
            blocks = [block for _, message in group for block in _blocks(message["content"])]
            made = _user(blocks) if role == "user" else _assistant(blocks, reveal, open_result)
        items += made
        origins += [group[0][0]] * len(made)
    return items, origins


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _message(role: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


def _content(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "input_text", "text": block["text"]} for block in _blocks(content)]


def _input_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A chat content part (`parts.user_parts`) as a Responses input part."""
    kind = part["type"]
    if kind == "text":
        return {"type": "input_text", "text": part["text"]}
    if kind == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
    file = part["file"]
    if "file_id" in file:
        return {"type": "input_file", "file_id": file["file_id"]}
    data = str(file["file_data"])
    if data.startswith("data:"):
        return {"type": "input_file", "file_data": data, "filename": file.get("filename")}
    return {"type": "input_file", "file_url": data, "filename": file.get("filename")}


def _user(blocks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    outputs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "tool_result":
            outputs.append({"type": "function_call_output", "call_id": block["tool_use_id"], "output": _tool_output(block)})
        else:
            parts += [_input_part(part) for part in user_parts(block)]
    return [*outputs, _message("user", parts)] if parts or not outputs else outputs


def _tool_output(block: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    content = block.get("content", "")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else [
        _input_part(part) for item in content for part in user_parts(item)]
    heading = "Error: " if block.get("is_error") is True else ""
    if all(part["type"] == "input_text" for part in parts):
        return heading + "\n".join(part["text"] for part in parts)
    return [{"type": "input_text", "text": heading}, *parts] if heading else parts


class _Assistant:
    """An assistant turn's items as its blocks are read: text gathers into a message until a
    block of another kind comes."""

    def __init__(self, blocks: list[dict[str, Any]], reveal: Reveal | None, open_result: ResultOpener) -> None:
        self.results = {block["tool_use_id"]: block for block in blocks if block["type"] in ("mcp_tool_result", "web_search_tool_result")}
        self.reveal, self.open_result = reveal, open_result
        self.items: list[dict[str, Any]] = []
        self.texts: list[str] = []

    def text(self, text: str) -> None:
        self.texts.append(text)

    def item(self, item: dict[str, Any]) -> None:
        self.flush()
        self.items.append(item)

    def flush(self) -> None:
        if self.texts:
            self.items.append(_message("assistant", [{"type": "output_text", "text": "".join(self.texts), "annotations": []}]))
            self.texts = []

    def read(self, block: dict[str, Any]) -> None:
        kind = block["type"]
        if kind == "text":
            self.text(block["text"])
        elif kind in ("thinking", "redacted_thinking"):
            thought = block["thinking"] if kind == "thinking" else (self.reveal(block["data"]) if self.reveal is not None else None)
            if thought:
                self.item({"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": thought}]})
        elif kind == "tool_use":
            self.item({"type": "function_call", "call_id": block["id"], "name": block["name"], "arguments": json.dumps(block["input"])})
        elif kind == "mcp_tool_use":
            self.item(_mcp_call(block, self.results.get(block["id"])))
        elif kind == "server_tool_use" and block["name"] == "web_search":
            self.item(_search_call(block, self.results.get(block["id"]), self.open_result))
        elif kind == "server_tool_use":
            self.text(f"\n(Called the server tool {block['name']} with {json.dumps(block['input'])}.)\n")


def _assistant(blocks: list[dict[str, Any]], reveal: Reveal | None, open_result: ResultOpener) -> list[dict[str, Any]]:
    turn = _Assistant(blocks, reveal, open_result)
    for block in blocks:
        turn.read(block)
    turn.flush()
    return turn.items


def _item_id(block_id: str, tag: str, prefix: str) -> str:
    """The Responses id an item had, from the id of the block it was shown as (`mcptoolu_X`: `mcp_X`)."""
    return f"{prefix}_{block_id.removeprefix(f'{tag}_')}"


def _mcp_call(use: Mapping[str, Any], result: Mapping[str, Any] | None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "mcp_call", "id": _item_id(use["id"], "mcptoolu", "mcp"), "server_label": use["server_name"],
                            "name": use["name"], "arguments": json.dumps(use["input"]), "output": None, "error": None}
    if result is None:  # a call whose result is not in the turn
        return {**item, "status": "incomplete"}
    content = result.get("content", "")
    text = content if isinstance(content, str) else "\n".join(block["text"] for block in content)
    if result.get("is_error") is True:
        return {**item, "status": "failed", "error": text or "The tool call failed."}
    return {**item, "status": "completed", "output": text}


def _search_call(use: Mapping[str, Any], result: Mapping[str, Any] | None, open_result: ResultOpener) -> dict[str, Any]:
    query = use["input"].get("query")
    query = query if isinstance(query, str) else ""
    action: dict[str, Any] = {"type": "search", "query": query, "queries": [query] if query else [], "sources": None}
    item = {"type": "web_search_call", "id": _item_id(use["id"], "srvtoolu", "ws"), "action": action}
    content = result.get("content") if result is not None else None
    if not isinstance(content, list):  # an error, or no result in the turn
        return {**item, "status": "failed"}
    action["sources"] = [_source(found, open_result) for found in content]
    return {**item, "status": "completed"}


def _source(result: Mapping[str, Any], open_result: ResultOpener) -> dict[str, Any]:
    opened = open_result(result["encrypted_content"]) or {}
    same = opened.get("url") == result["url"]  # a page sealed for another result is not this one's
    return {"type": "url", "url": result["url"], "title": result["title"], "text": str(opened.get("text") or "") if same else ""}
