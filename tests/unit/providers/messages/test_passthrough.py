"""providers.messages.passthrough: the Messages request of a model served by Anthropic's API, checked
as any other but for what only Anthropic knows, then forwarded; its events sent on as they came,
the head (up to the first content) in one piece, a break after it as Anthropic's `error` event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from contract.errors import InvalidRequestError, UpstreamError
from providers.messages.builtin import BuiltinMessages
from providers.messages.passthrough import MessagesUpstream, message, message_events, request_as_checked


def frame(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


EVENTS = [frame("message_start", message={}), frame("ping"), frame("content_block_start", index=0), frame("content_block_delta", index=0),
          frame("content_block_delta", index=0), frame("content_block_stop", index=0), frame("message_delta"), frame("message_stop")]


class Upstream:
    """The inference router as the pass-through sees it: every model passes; the events and
    the failure it holds are what it answers."""

    def __init__(self, events: list[bytes] | None = None, failure: UpstreamError | None = None, break_after: int | None = None) -> None:
        self.events, self.failure, self.break_after = events or EVENTS, failure, break_after
        self.sent: list[tuple[Mapping[str, Any], bytes]] = []
        self.closed = False

    async def passes_messages(self, model: Any) -> bool:
        return True

    async def messages(self, body: Mapping[str, Any], raw: bytes) -> bytes:
        self.sent.append((body, raw))
        return b'{"type":"message"}'

    async def stream_messages(self, body: Mapping[str, Any], raw: bytes) -> AsyncIterator[bytes]:
        self.sent.append((body, raw))
        return self._events()

    async def _events(self) -> AsyncIterator[bytes]:
        try:
            if self.failure is not None and self.break_after is None:
                raise self.failure
            for number, event in enumerate(self.events):
                if number == self.break_after:
                    raise UpstreamError("inference provider 'claude': its answer broke off", code="upstream_stream_error")
                yield event
        finally:
            self.closed = True


BODY: dict[str, Any] = {"model": "claude/sonnet", "max_tokens": 1024, "messages": [
    {"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Paris."},
                                  "citations": {"enabled": True}, "cache_control": {"type": "ephemeral"}},
                                 {"type": "text", "text": "Where?"}]},
    {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "Paris"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "demo", "input": {}},
        {"type": "text", "text": "Paris.", "citations": [{"type": "char_location", "cited_text": "Paris."}]}]},
    {"role": "user", "content": [{"type": "container_upload", "file_id": "file_1"}, {"type": "text", "text": "And?"}]}],
    "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}, {"type": "mcp_toolset", "mcp_server_name": "demo"},
              {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}],
    "mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "demo"}],
    "thinking": {"type": "enabled", "budget_tokens": 1024 - 1}}


def test_only_what_anthropic_alone_knows_stands_in_for_the_checks() -> None:
    body = {**BODY, "thinking": {"type": "adaptive"}, "max_tokens": 0}
    checked = request_as_checked(body)
    assert checked["max_tokens"] == 1 and [tool["type"] for tool in checked["tools"]][0] == "web_search_20250305"
    assert [block["type"] for block in checked["messages"][1]["content"]] == ["text", "text", "text", "text"]
    assert checked["messages"][0] is body["messages"][0] and checked["messages"][2]["content"][1] == {"type": "text", "text": "And?"}
    assert body["messages"][2]["content"][0]["type"] == "container_upload"  # the client's body as it was
    plain = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    assert request_as_checked(plain) is plain


async def test_a_request_passes_when_anthropic_takes_it_and_the_checks_still_refuse_a_mistake() -> None:
    upstream = Upstream()
    good = {**BODY, "thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048}
    assert await message(upstream, good, b"raw") == b'{"type":"message"}'
    assert upstream.sent == [(good, b"raw")]
    with pytest.raises(InvalidRequestError) as refused:
        await message(upstream, BODY, b"raw")  # a budget under 1,024 tokens, as Anthropic refuses it
    assert refused.value.message == "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    with pytest.raises(InvalidRequestError) as typo:
        await message(upstream, {**good, "messages": [{"role": "user", "content": [{"type": "txet", "text": "x"}]}]}, b"raw")
    assert typo.value.param == "messages.0.content.0"
    assert len(upstream.sent) == 1


async def test_the_head_goes_out_whole_up_to_the_first_content_then_each_event_as_it_came() -> None:
    events = [chunk async for chunk in await message_events(Upstream(), {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "Hi"}]}, b"raw")]
    assert events == [b"".join(EVENTS[:4]), *EVENTS[4:]]


async def test_a_refusal_is_raised_before_any_event_and_a_break_after_is_an_error_event() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    overloaded = UpstreamError("Overloaded", status_code=529, error_type="overloaded_error")
    with pytest.raises(UpstreamError) as refused:
        await message_events(Upstream(failure=overloaded), body, b"raw")
    assert refused.value.status == 529
    upstream = Upstream(break_after=5)
    events = [chunk async for chunk in await message_events(upstream, body, b"raw")]
    assert events[:-1] == [b"".join(EVENTS[:4]), EVENTS[4]] and upstream.closed
    assert events[-1].startswith(b"event: error\n")
    assert json.loads(events[-1].split(b"data: ")[1])["error"] == {"type": "api_error",
                                                                   "message": "inference provider 'claude': its answer broke off"}
    early = [chunk async for chunk in await message_events(Upstream(break_after=2), body, b"raw")]
    assert len(early) == 1 and early[0].startswith(b"".join(EVENTS[:2]) + b"event: error\n")  # the head made so far, then the error


async def test_the_builtin_provider_passes_a_passing_model_before_anything_else() -> None:
    upstream = Upstream()
    builtin = BuiltinMessages(upstream, None, None)  # type: ignore[arg-type]
    assert isinstance(upstream, MessagesUpstream) and builtin.upstream is not None
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "tools": [
        {"type": "web_search_20250305", "name": "web_search"}], "mcp_servers": [{"type": "url", "url": "https://x/mcp", "name": "x"}]}
    assert await builtin.create_message(body, b"raw") == b'{"type":"message"}'
    assert [chunk async for chunk in await builtin.stream_message({**body, "stream": True}, b"raw")] == [b"".join(EVENTS[:4]), *EVENTS[4:]]
    assert [raw for _, raw in upstream.sent] == [b"raw", b"raw"]
