"""The Messages request of a model whose upstream speaks Anthropic's Messages API (the `anthropic`
inference provider's), passed through: the client's bytes go to Anthropic untouched but for the
model id, and its answer, or its events, come back as they are (the inference router's
`messages`, `stream_messages`: traced, metered and counted against quotas as chat is).

The checks run first all the same (`checks.check_request`: a malformed request is refused the same
way whatever the model), on the request as they know it: what Anthropic takes and the translation
to chat has no place for (its server tools' blocks handed back, `mcp_tool_use`, `container_upload`,
its newer tool types, `max_tokens: 0` to warm the cache) is Anthropic's to check, and stands in as
something the checks accept.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

from contract import fastjson
from contract.errors import APIError
from providers.messages.checks import SERVER_TOOL_TYPES, check_request
from providers.messages.stream import error_frame

__all__ = ["ANTHROPIC_BLOCK_TYPES", "ANTHROPIC_TOOL_TYPES", "MessagesUpstream", "message", "message_events", "request_as_checked"]

ANTHROPIC_BLOCK_TYPES = frozenset((
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "tool_search_tool_result", "advisor_tool_result",
    "mcp_tool_use", "mcp_tool_result", "mcp_tool_listing", "container_upload", "compaction", "tool_addition", "tool_removal",
    "fallback",
))
"""The content blocks of anthropic 2.14's `BetaContentBlockParam` that the checks do not know (the
translation to chat has no place for them): with a pass-through upstream, Anthropic checks them."""

ANTHROPIC_TOOL_TYPES = frozenset((
    "mcp_toolset", "bash_20241022", "text_editor_20241022", "computer_20241022", "computer_20250124", "computer_20251124",
    "advisor_20260301",
)) - frozenset(SERVER_TOOL_TYPES)
"""The tool types of anthropic 2.14's `BetaToolUnionParam` beyond the checks' `SERVER_TOOL_TYPES`."""

_STAND_IN_BLOCK = {"type": "text", "text": "-"}
_STAND_IN_TOOL = SERVER_TOOL_TYPES[0]


@runtime_checkable
class MessagesUpstream(Protocol):
    """What the pass-through needs of the inference API (its router)."""

    async def passes_messages(self, model: Any) -> bool: ...

    async def messages(self, body: Mapping[str, Any], raw: bytes) -> bytes: ...

    async def stream_messages(self, body: Mapping[str, Any], raw: bytes) -> AsyncIterator[bytes]: ...


async def message(upstream: MessagesUpstream, body: dict[str, Any], raw: bytes) -> bytes:
    """The upstream's `Message`, as it answered (with the client's model id)."""
    check_request(request_as_checked(body))
    return await upstream.messages(body, raw)


async def token_count(upstream: MessagesUpstream, body: dict[str, Any]) -> dict[str, Any] | None:
    """Anthropic's own count (its `count_tokens` route costs nothing; a one-token completion would
    be a billed call), the body forwarded as the client sent it but for the model id; None when
    the router or the model's provider does not count."""
    count = getattr(upstream, "count_message_tokens", None)
    if count is None:
        return None
    check_request(request_as_checked({**body, "max_tokens": 1}))  # a count names no max_tokens
    answer = await count(body, fastjson.dumps(body))
    if answer is None:
        return None
    counted = fastjson.loads(answer)
    return counted if isinstance(counted, dict) else {"input_tokens": 0}


async def message_events(upstream: MessagesUpstream, body: dict[str, Any], raw: bytes) -> AsyncIterator[bytes]:
    """The upstream's events as they come, each whole. Its first is awaited here, so a refusal
    (the upstream's status, a 529 kept) is the request's error, not an event."""
    check_request(request_as_checked(body))
    events = aiter(await upstream.stream_messages(body, raw))
    first = await anext(events, None)
    return _events(first, events)


async def _events(first: bytes | None, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The head (message_start and the events up to the first content, which go out with the
    status line, as the translated stream's do), then each event as it comes; an error past the
    first event is Anthropic's `error` event, as its own stream ends when it breaks."""
    head = [] if first is None else [first]
    try:
        while head and not _content(head[-1]) and (event := await anext(events, None)) is not None:
            head.append(event)
        if head:
            yield b"".join(head)
            head = []
        async for event in events:
            yield event
    except APIError as error:
        yield b"".join(head) + error_frame(error)
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()  # type: ignore[attr-defined]


def _content(event: bytes) -> bool:
    """Whether the event is one of an answer's content, or its end, or unnamed (the head waits for
    no more)."""
    if not event.startswith(b"event:"):
        return True
    return event[6:40].lstrip().startswith((b"content_block_delta", b"message_delta", b"message_stop", b"error"))


def request_as_checked(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the checks see it: Anthropic's own blocks and tools (see the module's docstring)
    stood in for by ones the checks accept, `max_tokens: 0` by 1; `body` itself when it has none."""
    messages = body.get("messages")
    tools = body.get("tools")
    stood_in: dict[str, Any] = {}
    if isinstance(messages, list) and any(_anthropic_block(block) for message in messages for block in _blocks(message)):
        stood_in["messages"] = [_message_as_checked(message) for message in messages]
    if isinstance(tools, list) and any(_typed(tool, ANTHROPIC_TOOL_TYPES) for tool in tools):
        stood_in["tools"] = [{**tool, "type": _STAND_IN_TOOL} if _typed(tool, ANTHROPIC_TOOL_TYPES) else tool for tool in tools]
    if body.get("max_tokens") == 0 and type(body.get("max_tokens")) is int:
        stood_in["max_tokens"] = 1
    return {**body, **stood_in} if stood_in else body


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _anthropic_block(block: Any) -> bool:
    return _typed(block, ANTHROPIC_BLOCK_TYPES)


def _typed(value: Any, types: frozenset[str]) -> bool:
    """Whether `value` is an object whose `type` is one of `types` (read before the checks: any shape)."""
    return isinstance(value, dict) and isinstance(kind := value.get("type"), str) and kind in types


def _message_as_checked(message: Any) -> Any:
    if not any(_anthropic_block(block) for block in _blocks(message)):
        return message
    return {**message, "content": [_STAND_IN_BLOCK if _anthropic_block(block) else block for block in message["content"]]}
