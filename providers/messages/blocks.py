"""The shapes of a message's content blocks, as anthropic's `*BlockParam` types give them, each
refused as Anthropic refuses it (`fields.py`).

A role takes the blocks the translation has a place for: a user's text, images, documents,
search results and tool results; an assistant's text, thinking and tool uses, and the server
tools' calls and results it hands back (`server_tool_use` and `web_search_tool_result`,
`mcp_tool_use` and `mcp_tool_result`); a system message's text. Any other block (a
`container_upload`, a `web_fetch_tool_result`...) is refused with the tags this server expects,
as Anthropic refuses a tag it does not know.

`cache_control`, a text block's `citations` and a tool use's `caller` are dropped by the
translation, so their shape is not held against a request beyond being objects; a document's
`citations.enabled` asks for citations (`citations.py`).
"""

from __future__ import annotations

from typing import Any

from providers.messages.fields import (
    Check,
    Where,
    anything,
    boolean,
    dictionary,
    fields,
    list_of,
    literal,
    nullable,
    refuse,
    str_or_list,
    tagged,
    text,
)

__all__ = ["ROLES", "SERVER_BLOCK_TYPES", "check_message", "check_system", "text_block"]

ROLES = ("user", "assistant", "system")
"""The roles of anthropic 2.14's `MessageParam` (`UserMessageParam`, `AssistantMessageParam`,
`SystemMessageParam`: a system message inside `messages`, text only)."""

_CACHE = nullable(dictionary)
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _text_block(value: Any, where: Where) -> None:
    fields({"text": text, "type": literal("text")}, {"cache_control": _CACHE, "citations": nullable(list_of(dictionary))})(value, where)
    if not value["text"].strip():
        block = Where(where.loc.removesuffix(".text"), where.key("text").param)  # said of the block, without its tag
        problem = "must contain non-whitespace text" if value["text"] else "must be non-empty"
        raise refuse(block, f"text content blocks {problem}")


text_block: Check = _text_block
"""A `TextBlockParam` whose text is not empty nor only whitespace (Anthropic's "text content
blocks must be non-empty", "... must contain non-whitespace text")."""

_IMAGE_SOURCE = tagged({
    "base64": fields({"data": text, "media_type": literal(*_IMAGE_TYPES), "type": literal("base64")}),
    "url": fields({"type": literal("url"), "url": text}),
    "file": fields({"file_id": text, "type": literal("file")}),
})
_IMAGE = fields({"source": _IMAGE_SOURCE, "type": literal("image")}, {"cache_control": _CACHE, "transformations": nullable(dictionary)})

_DOCUMENT_SOURCE = tagged({
    "base64": fields({"data": text, "media_type": literal("application/pdf"), "type": literal("base64")}),
    "text": fields({"data": text, "media_type": literal("text/plain"), "type": literal("text")}),
    "content": fields({"content": str_or_list(tagged({"text": _text_block, "image": _IMAGE})), "type": literal("content")}),
    "url": fields({"type": literal("url"), "url": text}),
    "file": fields({"file_id": text, "type": literal("file")}),
})
_DOCUMENT = fields({"source": _DOCUMENT_SOURCE, "type": literal("document")}, {
    "cache_control": _CACHE, "citations": nullable(dictionary), "context": nullable(text), "title": nullable(text)})
_SEARCH_RESULT = fields({"content": list_of(_text_block), "source": text, "title": text, "type": literal("search_result")},
                        {"cache_control": _CACHE, "citations": dictionary})
_RESULT_CONTENT = str_or_list(tagged({"text": _text_block, "image": _IMAGE, "search_result": _SEARCH_RESULT, "document": _DOCUMENT}))


def _tool_result(value: Any, where: Where) -> None:
    fields({"tool_use_id": text, "type": literal("tool_result")}, {
        "cache_control": _CACHE, "content": _RESULT_CONTENT, "is_error": boolean, "toolset_name": nullable(text)})(value, where)
    if value.get("is_error") is True and not value.get("content"):
        raise refuse(where, "content cannot be empty if is_error is true")


_SERVER_TOOL_NAMES = ("web_search", "web_fetch", "code_execution", "bash_code_execution", "text_editor_code_execution",
                      "tool_search_tool_regex", "tool_search_tool_bm25")
_SEARCH_ERRORS = ("invalid_tool_input", "unavailable", "max_uses_exceeded", "too_many_requests", "query_too_long", "request_too_large")
_WEB_RESULT = fields({"encrypted_content": text, "title": text, "type": literal("web_search_result"), "url": text},
                     {"page_age": nullable(text)})
_WEB_ERROR = fields({"error_code": literal(*_SEARCH_ERRORS), "type": literal("web_search_tool_result_error")})


def _search_content(value: Any, where: Where) -> None:
    """A web search's results, or its error (anthropic's `WebSearchToolResultBlockParamContentParam`)."""
    (_WEB_ERROR if isinstance(value, dict) else list_of(_WEB_RESULT))(value, where)


_SERVER_BLOCKS: dict[str, Check] = {
    "server_tool_use": fields({"id": text, "input": dictionary, "name": literal(*_SERVER_TOOL_NAMES), "type": literal("server_tool_use")},
                              {"cache_control": _CACHE, "caller": anything}),
    "web_search_tool_result": fields({"content": _search_content, "tool_use_id": text, "type": literal("web_search_tool_result")},
                                     {"cache_control": _CACHE, "caller": anything}),
    "mcp_tool_use": fields({"id": text, "input": dictionary, "name": text, "server_name": text, "type": literal("mcp_tool_use")},
                           {"cache_control": _CACHE}),
    "mcp_tool_result": fields({"tool_use_id": text, "type": literal("mcp_tool_result")},
                              {"cache_control": _CACHE, "content": str_or_list(_text_block), "is_error": boolean}),
}
SERVER_BLOCK_TYPES = frozenset(_SERVER_BLOCKS)
"""The blocks of server tools' calls and results an assistant's turn may hand back (answered
through the responses provider: `server_tools.py`)."""

_BLOCKS: dict[str, dict[str, Check]] = {
    "user": {"text": _text_block, "image": _IMAGE, "document": _DOCUMENT, "search_result": _SEARCH_RESULT, "tool_result": _tool_result},
    "assistant": {
        "text": _text_block,
        "thinking": fields({"signature": text, "thinking": text, "type": literal("thinking")}),
        "redacted_thinking": fields({"data": text, "type": literal("redacted_thinking")}),
        "tool_use": fields({"id": text, "input": dictionary, "name": text, "type": literal("tool_use")},
                           {"cache_control": _CACHE, "caller": anything, "toolset_name": nullable(text)}),
        **_SERVER_BLOCKS,
    },
    "system": {"text": _text_block},
}
_CONTENT = {role: list_of(tagged(blocks)) for role, blocks in _BLOCKS.items()}


def check_message(message: Any, where: Where, last: bool) -> None:
    """One entry of `messages` (`last`: the final one, which alone may be an empty assistant
    turn: a prefill of nothing)."""
    dictionary(message, where)
    if "role" not in message:
        raise refuse(where.key("role"), "Field required")
    role = message["role"]
    literal(*ROLES)(role, where.key("role"))
    if "content" not in message:
        raise refuse(where.key("content"), "Field required")
    for name in message:
        if name not in ("role", "content"):
            raise refuse(where.key(name), "Extra inputs are not permitted")
    content = message["content"]
    if isinstance(content, str):
        return  # an empty string is let through, as Anthropic lets it through
    _CONTENT[role](content, where.key("content"))
    if not content and not (last and role == "assistant"):
        raise refuse(where, "all messages must have non-empty content except for the optional final assistant message")


def check_system(system: Any, where: Where) -> None:
    """The top-level `system`: a string or text blocks (no tags: `TextBlockParam` is no union)."""
    if isinstance(system, str):
        if system and not system.strip():
            raise refuse(where, "text content blocks must contain non-whitespace text")
        return
    list_of(_text_block)(system, where)
