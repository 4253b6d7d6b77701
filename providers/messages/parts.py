"""A user's content blocks as chat content parts, and a tool result as a chat `tool` message.

- text: a `text` part; `cache_control` and `citations` are dropped (a chat upstream has neither).
- image: an `image_url` part: a base64 source as a data URL, a URL as it is; a file named by id
  as a `file` part with its `file_id`, which the chat route's reading of files
  (`runtime.apis.files.inline.chat_messages_with_files`) turns into an image.
- document: a base64 PDF as a `file` part with the PDF as a data URL (`file_data`, OpenAI's
  shape), named by its title; a URL as a `file` part whose `file_data` is the URL, as the
  Responses translation passes an `input_file`'s `file_url` on (a chat part has no URL field); a
  file named by id as a `file` part with its `file_id`; a plain text source, or a content source's
  text blocks, as text parts. A document's title and context go before it as text. A document
  with citations enabled is shown in numbered sentences instead, when the caller has its state
  (`citations.py`).
- search_result: a text part: its title, its source, its texts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ToolResult", "user_parts"]

_DEFAULT_PDF_NAME = "document.pdf"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image(source: Mapping[str, Any]) -> dict[str, Any]:
    kind = source["type"]
    if kind == "base64":
        return {"type": "image_url", "image_url": {"url": f"data:{source['media_type']};base64,{source['data']}"}}
    if kind == "url":
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    return {"type": "file", "file": {"file_id": source["file_id"]}}


def _heading(block: Mapping[str, Any]) -> str:
    """A document's title and context, as the lines that head its text ("" when it has neither)."""
    lines = ([f"[Document: {block['title']}]"] if block.get("title") else []) + ([block["context"]] if block.get("context") else [])
    return "\n".join(lines)


def _document(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    source, heading = block["source"], _heading(block)
    kind = source["type"]
    if kind == "text":
        return [_text(f"{heading}\n{source['data']}" if heading else source["data"])]
    if kind == "content":
        content = source["content"]
        inner = [_text(content)] if isinstance(content, str) else [
            _text(item["text"]) if item["type"] == "text" else _image(item["source"]) for item in content]
        return ([_text(heading)] if heading else []) + inner
    if kind == "base64":
        part = {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{source['data']}",
                                         "filename": block.get("title") or _DEFAULT_PDF_NAME}}
    elif kind == "url":
        part = {"type": "file", "file": {"file_data": source["url"], "filename": block.get("title") or _url_name(source["url"])}}
    else:
        part = {"type": "file", "file": {"file_id": source["file_id"]}}
    return ([_text(heading)] if heading else []) + [part]


def _url_name(url: str) -> str:
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name or _DEFAULT_PDF_NAME


def _search_result(block: Mapping[str, Any]) -> dict[str, Any]:
    texts = "\n\n".join(item["text"] for item in block["content"])
    return _text(f"[Search result: {block['title']}]\nSource: {block['source']}\n{texts}")


def user_parts(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat parts of one of a user's blocks other than a tool result."""
    kind = block["type"]
    if kind == "text":
        return [_text(block["text"])]
    if kind == "image":
        return [_image(block["source"])]
    if kind == "document":
        return _document(block)
    return [_search_result(block)]


class ToolResult:
    """A `tool_result` block as chat reads it: the `tool` message, and the parts a tool message
    cannot hold (chat tools take text only), which follow it in a user message."""

    def __init__(self, block: Mapping[str, Any]) -> None:
        content = block.get("content", "")
        texts: list[str] = []
        self.parts: list[dict[str, Any]] = []
        for item in [_text(content)] if isinstance(content, str) else (part for item in content for part in user_parts(item)):
            if item["type"] == "text":
                texts.append(item["text"])
            else:
                self.parts.append(item)
        text = "\n".join(texts)
        if not text and self.parts:
            text = "(The result is in the next message.)"
        if block.get("is_error") is True:
            # A chat tool message has no error flag: the model is told in the text, as Anthropic's
            # models are told by `is_error`, that the call failed rather than returned this.
            text = f"Error: {text}"
        self.message = {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}
