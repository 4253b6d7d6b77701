"""The I/O around the server tools' translations (`providers/messages/via_responses.py`), over a
fake responses provider that records what it is asked and answers what a test gives it: the
refusals in the Messages request's terms, a stream's head, web search results read back, PDFs."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from contract import fastjson
from contract.errors import APIError, InvalidRequestError
from contract.responses.models import CompactRequest, CreateResponse
from providers.messages.via_responses import ViaResponses
from providers.responses.sealing import ReasoningSeal
from support.documents import pdf_with_text

DOCS = {"type": "url", "url": "https://mcp.example.com/mcp", "name": "docs"}
SEARCH = {"type": "web_search_20250305", "name": "web_search"}
PAGE = {"type": "url", "url": "https://tides.example.org/harbour", "title": "Tides", "text": "High water at 06:12."}
SEARCHED = {"id": "ws_1", "type": "web_search_call", "status": "completed",
            "action": {"type": "search", "query": "tides", "queries": ["tides"], "sources": [PAGE]}}
ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "At 06:12.", "annotations": []}]}


class FakeResponses:
    """A responses provider answering with `output` (or raising `error`), and its stream with `events`."""

    def __init__(self, output: list[dict[str, Any]] | None = None, events: list[dict[str, Any]] | None = None,
                 error: APIError | None = None) -> None:
        self.output, self.events, self.error = output or [], events or [], error
        self.requests: list[CreateResponse] = []

    async def create_response(self, request: CreateResponse) -> dict[str, Any]:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        return {"status": "completed", "output": self.output, "usage": {"input_tokens": 5, "output_tokens": 2}}

    async def stream_response(self, request: CreateResponse) -> AsyncIterator[dict[str, Any]]:
        self.requests.append(request)
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        for event in self.events:
            yield event
        if self.error is not None:
            raise self.error

    async def count_input_tokens(self, request: CreateResponse) -> dict[str, Any]:
        self.requests.append(request)
        return {"object": "response.input_tokens", "input_tokens": 42}

    async def compact_response(self, request: CompactRequest) -> dict[str, Any]:
        raise NotImplementedError


def via(responses: FakeResponses | None) -> ViaResponses:
    return ViaResponses(responses, ReasoningSeal(lambda: b"k" * 32), sign=lambda text: "sig", reveal=lambda data: None)  # type: ignore[arg-type]


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], **fields}


def test_without_a_responses_provider_server_tools_are_a_400_naming_the_field() -> None:
    for fields, field in (({"mcp_servers": [DOCS]}, "mcp_servers"), ({"tools": [SEARCH]}, "tools.0")):
        with pytest.raises(InvalidRequestError) as refused:
            asyncio.run(via(None).create_message(body(**fields)))
        assert refused.value.param == field and refused.value.message.startswith(f"{field}: ")
    with pytest.raises(InvalidRequestError) as refused:  # checked first, as Anthropic checks
        asyncio.run(via(None).create_message(body(mcp_servers=[{"type": "url", "name": "x"}])))
    assert refused.value.message == "mcp_servers.0.url: Field required"


def test_the_providers_refusal_names_the_messages_field() -> None:
    refusal = InvalidRequestError("Invalid 'tools[0].server_url': '10.0.0.1' is a private or reserved address.",
                                  param="tools[0].server_url", code="invalid_value")
    with pytest.raises(InvalidRequestError) as refused:
        asyncio.run(via(FakeResponses(error=refusal)).create_message(body(mcp_servers=[DOCS])))
    assert (refused.value.param, refused.value.message) == ("mcp_servers.0.url", "mcp_servers.0.url: '10.0.0.1' is a private or reserved address.")


def test_a_search_result_handed_back_is_read_by_the_model_again() -> None:
    responses = FakeResponses(output=[SEARCHED, ANSWER])
    tools = via(responses)
    message = fastjson.loads(asyncio.run(tools.create_message(body(tools=[SEARCH]))))
    result = message["content"][1]["content"][0]
    assert result["url"] == PAGE["url"] and PAGE["text"] not in result["encrypted_content"]  # sealed, not shown
    again = body(tools=[SEARCH], messages=[{"role": "user", "content": "Tides?"}, {"role": "assistant", "content": message["content"]},
                                           {"role": "user", "content": "And?"}])
    asyncio.run(tools.create_message(again))
    replayed = responses.requests[-1].input[1]
    assert isinstance(replayed, dict) and replayed["action"]["sources"] == [PAGE]
    assert responses.requests[-1].include == ["web_search_call.action.sources"] and responses.requests[-1].store is False


def test_a_stream_refused_before_any_block_is_the_requests_error() -> None:
    failed = {"type": "response.failed", "response": {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "Slow down."}}}
    listing = {"type": "response.output_item.added", "item": {"id": "mcpl_1", "type": "mcp_list_tools"}}
    with pytest.raises(APIError) as refused:
        asyncio.run(via(FakeResponses(events=[listing, failed])).stream_message(body(mcp_servers=[DOCS])))
    assert refused.value.status == 429 and refused.value.message == "Slow down."


def test_a_stream_that_breaks_after_its_head_ends_with_an_error_event() -> None:
    events = [{"type": "response.output_item.added", "item": {"id": "msg_1", "type": "message"}},
              {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hel"}]

    async def frames() -> list[bytes]:
        stream = await via(FakeResponses(events=events, error=APIError("The model server went away.", status_code=502))).stream_message(
            body(mcp_servers=[DOCS]))
        return [frame async for frame in stream]

    head, tail = asyncio.run(frames())
    assert head.startswith(b"event: message_start\n") and b"event: ping" in head and b'"text":"Hel"' in head
    assert tail == b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"The model server went away."}}\n\n'


def test_count_tokens_and_an_inline_pdf_read_as_text() -> None:
    responses = FakeResponses()
    pdf = base64.b64encode(pdf_with_text("The tide turns at noon.")).decode()
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}, "title": "tides.pdf"}
    counted = asyncio.run(via(responses).count_tokens({"model": "claude-sonnet", "mcp_servers": [DOCS], "thinking": {"type": "adaptive"},
                                                       "messages": [{"role": "user", "content": [document]}]}))
    assert counted == {"input_tokens": 42}
    [message] = responses.requests[-1].input
    assert isinstance(message, dict) and message["content"][0] == {"type": "input_text", "text": "[Document: tides.pdf]"}
    assert message["content"][1]["type"] == "input_text" and "The tide turns at noon." in message["content"][1]["text"]


def test_an_image_the_model_cannot_take_is_the_requests_400_not_a_502() -> None:
    """Found by mutating valid requests: a streamed response failing `invalid_image_format` before any block."""
    from providers.messages.via_responses import _status

    assert _status("invalid_image_format") == 400 and _status("invalid_base64_image") == 400
    assert _status("rate_limit_exceeded") == 429 and _status("server_error") == 502
