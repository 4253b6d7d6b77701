"""Messages requests with server tools (`server_tools.uses_server_tools`: `mcp_servers`, a web
search tool, or their blocks handed back) answered by the stack's responses provider, whose tool
loop runs them on the tool runtimes (MCP, web search) under their rules: the MCP runtime's address
policy checks each server URL, so an `mcp_servers` URL on a private address is refused as a
Responses `server_url` is.

The I/O around the pure translations: the request (`server_tools.py`), the answer
(`from_response.py`) and its stream (`response_stream.py`). The responses provider's refusals
name the Messages request's fields (`mcp_servers.0.url`, `tools.1.allowed_domains`). A web search
result's `encrypted_content` is the page as the model read it, sealed with the server's key, so a
result handed back is read by the model again (and a result not sealed here is read as its url and
title).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from contract import fastjson
from contract.errors import APIError, InvalidRequestError, UpstreamError
from contract.responses.protocol import ResponsesProvider
from providers.messages.checks import check_request
from providers.messages.from_response import message_from_response
from providers.messages.response_stream import ResponseStream
from providers.messages.server_tools import Translated, in_messages_terms, response_request, server_tools_field
from providers.messages.stream import Event, error_frame, frames
from providers.responses.failures import RESPONSE_ERROR_CODES
from providers.responses.sealing import ReasoningSeal
from providers.messages.pdfs import PDF_DATA_URL, pdf_as_text

__all__ = ["ViaResponses"]

_RESULT = "web_search_result"
_STATUSES = {"rate_limit_exceeded": 429, "invalid_prompt": 400, "context_length_exceeded": 400, "service_unavailable": 503}
_CLIENTS = frozenset(code for code in RESPONSE_ERROR_CODES if "image" in code)
"""A response's failure codes that are the request's mistake (an image the model cannot take): a 400."""


def _status(code: str) -> int:
    return _STATUSES.get(code) or (400 if code in _CLIENTS else 502)


class ViaResponses:
    """See the module's docstring."""

    def __init__(self, responses: ResponsesProvider | None, seal: ReasoningSeal | None, *, sign: Callable[[str], str],
                 reveal: Callable[[str], str | None]) -> None:
        self.responses = responses
        self.seal = seal
        self.sign = sign
        self.reveal = reveal

    async def create_message(self, body: dict[str, Any]) -> bytes:
        responses, translated = await self._translated(body, stream=False)
        try:
            response = await responses.create_response(translated.request)
        except APIError as error:
            raise in_messages_terms(error, translated) from None
        message = message_from_response(response, body["model"], web_search=translated.web_search, sign=self.sign,
                                        seal_result=self._seal_result)
        return fastjson.dumps(message)

    async def stream_message(self, body: dict[str, Any]) -> AsyncIterator[bytes]:
        responses, translated = await self._translated(body, stream=True)
        stream = ResponseStream(body["model"], web_search=translated.web_search, sign=self.sign, seal_result=self._seal_result)
        head = [*stream.start(), ("ping", {"type": "ping"})]
        try:
            events = aiter(await responses.stream_response(translated.request))
        except APIError as error:
            raise in_messages_terms(error, translated) from None
        try:
            # The head waits for the first block, so a refusal before any (a model server's, or a
            # tool runtime's) is the request's error, with its status.
            while not any(name.startswith("content_block") for name, _ in head) and (event := await anext(events, None)) is not None:
                head += stream.feed(event)
                if stream.failure is not None:  # failed before any block was shown: the request's error
                    code, message = stream.failure
                    raise UpstreamError(message, status_code=_status(code))
        except APIError as error:
            await _close(events)
            raise in_messages_terms(error, translated) from None
        return _frames(head, stream, events)

    async def count_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        # As for chat: no max_tokens is asked for, and thinking changes what is answered, not what is read.
        counted = {key: value for key, value in body.items() if key not in ("thinking", "stream")}
        responses, translated = await self._translated({**counted, "max_tokens": 1}, stream=False)
        try:
            answer = await responses.count_input_tokens(translated.request)
        except APIError as error:
            raise in_messages_terms(error, translated) from None
        return {"input_tokens": int(answer.get("input_tokens") or 0)}

    async def _translated(self, body: dict[str, Any], *, stream: bool) -> tuple[ResponsesProvider, Translated]:
        check_request(body)
        if self.responses is None:
            field = server_tools_field(body)
            raise InvalidRequestError(f"{field}: server tools (MCP servers, web search) run through the responses API, which this "
                                      "server does not serve: add a responses provider to run.yaml.", param=field)
        translated = response_request(body, stream=stream, reveal=self.reveal, open_result=self._open_result)
        items = translated.request.input
        if isinstance(items, list) and any(_pdf(part) for item in items for part in _parts(item)):
            read = [await _pdfs_read(item, origin) for item, origin in zip(items, translated.origins)]
            translated = Translated(translated.request.model_copy(update={"input": read}), translated.web_search, translated.tools,
                                    translated.origins)
        return self.responses, translated

    def _seal_result(self, result: Mapping[str, Any]) -> str:
        payload = {"type": _RESULT, **result}
        if self.seal is None:
            return base64.urlsafe_b64encode(fastjson.dumps(payload)).decode()
        return self.seal.seal({"content": [payload]})

    def _open_result(self, token: str) -> Mapping[str, Any] | None:
        try:
            opened = self.seal.open(token, "encrypted_content") if self.seal is not None else {
                "content": [fastjson.loads(base64.urlsafe_b64decode(token.encode()))]}
        except (InvalidRequestError, ValueError):
            return None
        content = opened.get("content") if isinstance(opened, dict) else None
        result = content[0] if isinstance(content, list) and content else None
        return result if isinstance(result, dict) and result.get("type") == _RESULT else None


async def _frames(head: list[Event], stream: ResponseStream, events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        yield frames(head)
        async for event in events:
            translated = stream.feed(event)
            if translated:
                yield frames(translated)
            if stream.ended:
                break
    except APIError as error:
        yield error_frame(error)
    finally:
        await _close(events)


async def _close(events: AsyncIterator[dict[str, Any]]) -> None:
    with contextlib.suppress(Exception):
        await events.aclose()  # type: ignore[attr-defined]


def _parts(item: Mapping[str, Any]) -> list[Any]:
    parts = item.get("content") if item.get("type") == "message" else item.get("output")
    return parts if isinstance(parts, list) else []


def _pdf(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "input_file" and str(part.get("file_data") or "").startswith(PDF_DATA_URL)


async def _pdfs_read(item: dict[str, Any], index: int) -> dict[str, Any]:
    """A PDF sent inline read as its text, as the chat translation reads it (few chat models take a PDF)."""
    if not any(_pdf(part) for part in _parts(item)):
        return item
    read: list[Any] = []
    for part in _parts(item):
        if not _pdf(part):
            read.append(part)
            continue
        name = str(part.get("filename") or "document.pdf")
        read.append({"type": "input_text", "text": await pdf_as_text(part["file_data"][len(PDF_DATA_URL):], name, f"messages.{index}")})
    return {**item, "content" if item.get("type") == "message" else "output": read}
