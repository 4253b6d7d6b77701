"""The built-in messages provider: Anthropic's Messages API over any chat-completions model the
stack serves, by translating each request to a chat completion and its answer back
(`request.py`, `response.py`, `stream.py`: pure functions, tested with golden pairs; the plainest
requests by `plain.py`, which builds the same body at a tenth of the cost). A request
with server tools (`mcp_servers`, web search) is answered by the responses provider's tool loop
instead (`via_responses.py`).

Thinking blocks carry a `signature`: the thinking sealed with the server's reasoning key (the
responses provider's, by default the same key file), so `redacted_thinking` handed back is read
again and a forged one refused; a `thinking` block handed back is read by its text.

Documents with citations enabled are shown to the model in numbered sentences (a PDF's pages read
here first) and its markers turned into citations (`citations.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract import fastjson
from contract.errors import APIError
from contract.files.protocol import FilesProvider
from contract.responses.protocol import ResponsesProvider
from contract.spec import Api, ProviderContext, ProviderSpec
from providers.messages import passthrough
from providers.messages.checks import check_request
from providers.messages.citations import CitedDocuments, citable_pdfs, cited_documents
from providers.messages.request import chat_body
from providers.messages.pdfs import PDF_DATA_URL, pdf_as_text, pdf_bytes
from providers.messages.plain import plain_chat_body
from providers.messages.response import message_from_chat
from providers.messages.server_tools import uses_server_tools
from providers.messages.stream import MessageStream, error_frame, frames
from providers.messages.via_responses import ViaResponses
from providers.responses.model_calls import Inference
from providers.responses.sealing import ReasoningSeal, load_key
from runtime.apis.files.inline import chat_messages_with_files, pdf_pages

__all__ = ["BUILTIN", "BuiltinMessages", "BuiltinMessagesConfig"]


class BuiltinMessagesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reasoning_key: str | None = Field(default=None, description=(
        "The key that signs thinking blocks (32 bytes in base64); default: the state directory's reasoning.key, which the "
        "responses provider uses too"))


class BuiltinMessages:
    """See the module's docstring."""

    def __init__(self, inference: Inference, files: FilesProvider | None, seal: ReasoningSeal | None,
                 responses: ResponsesProvider | None = None) -> None:
        self.inference = inference
        self.files = files
        self.seal = seal
        # A stack with an Anthropic upstream passes its models' requests through (passthrough.py).
        self.upstream = inference if isinstance(inference, passthrough.MessagesUpstream) else None
        # Server tools (mcp_servers, web search) run in the responses provider's tool loop (via_responses.py).
        self.server_tools = ViaResponses(responses, seal, sign=self._sign, reveal=self._reveal)

    async def create_message(self, body: dict[str, Any], raw: bytes) -> bytes:
        if self.upstream is not None and await self.upstream.passes_messages(body.get("model")):  # first: Anthropic runs its own tools
            return await passthrough.message(self.upstream, body, raw)
        chat, cited = plain_chat_body(body, stream=False), None
        if chat is None:
            if uses_server_tools(body):
                return await self.server_tools.create_message(body)
            chat, cited = await self._chat(body, stream=False)
        completion = fastjson.loads(await self.inference.chat_completion(chat, echo_model=False))
        return fastjson.dumps(message_from_chat(completion, body["model"], stop_sequences=_stops(body), sign=self._sign, cited=cited))

    async def stream_message(self, body: dict[str, Any], raw: bytes) -> AsyncIterator[bytes]:
        if self.upstream is not None and await self.upstream.passes_messages(body.get("model")):
            return await passthrough.message_events(self.upstream, body, raw)
        chat, cited = plain_chat_body(body, stream=True), None
        if chat is None:
            if uses_server_tools(body):
                return await self.server_tools.stream_message(body)
            chat, cited = await self._chat(body, stream=True)
        chunks = aiter(await self.inference.stream_chat_completion(chat, echo_model=False))
        first = await anext(chunks, None)  # the model server's refusal is raised here, before any event
        stream = MessageStream(body["model"], stop_sequences=_stops(body), sign=self._sign, cited=cited)
        return _frames(stream, first, chunks)

    async def count_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        """Counted by the model's server: the prompt of a one-token completion, as Responses'
        `input_tokens` counts (exact for the model, where an estimate would not be)."""
        if self.upstream is not None and await self.upstream.passes_messages(body.get("model")):
            counted = await passthrough.token_count(self.upstream, body)
            if counted is not None:
                return counted
        if uses_server_tools(body):
            return await self.server_tools.count_tokens(body)
        # max_tokens is not asked for here, and thinking changes what is answered, not what is read.
        counted = {key: value for key, value in body.items() if key not in ("thinking", "stream")}
        chat, _ = await self._chat({**counted, "max_tokens": 1}, stream=False)
        chat["max_completion_tokens"] = 1
        completion = fastjson.loads(await self.inference.chat_completion(chat, echo_model=False))
        return {"input_tokens": int((completion.get("usage") or {}).get("prompt_tokens") or 0)}

    async def _chat(self, body: dict[str, Any], *, stream: bool) -> tuple[dict[str, Any], CitedDocuments | None]:
        """The chat body, and the state of the request's cited documents (None: it cites none)."""
        check_request(body)
        await self.inference.resolve(body["model"])  # an unknown model: a 404 before anything else
        pages = {data: await pdf_pages(pdf_bytes(data, "messages"), "document.pdf", "messages") for data in citable_pdfs(body)}
        cited = cited_documents(body, pages)
        chat = chat_body(body, body["model"], stream=stream, reveal=self._reveal, cited=cited)
        chat["messages"] = await _documents_read(chat["messages"], self.files)
        return chat, cited

    def _sign(self, thinking: str) -> str:
        """The thinking sealed as a reasoning item's content is (the seal keeps `content` and `summary` only)."""
        return self.seal.seal({"content": [{"type": "reasoning_text", "text": thinking}]}) if self.seal is not None else ""

    def _reveal(self, data: str) -> str | None:
        if self.seal is None:
            return None
        parts = self.seal.open(data, "redacted_thinking.data").get("content") or []
        return "".join(str(part.get("text") or "") for part in parts if isinstance(part, dict))


def _stops(body: dict[str, Any]) -> Sequence[str]:
    stops = body.get("stop_sequences")
    return stops if isinstance(stops, list) else ()


async def _frames(stream: MessageStream, first: bytes | None, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The events of the answer: the head (message_start, a ping, and the first chunk's) in one
    frame, then the rest; an error past the head is Anthropic's `error` event, as its stream ends
    when it breaks."""
    try:
        head = [*stream.start(), ("ping", {"type": "ping"})]
        if first is not None:
            head += stream.feed(fastjson.loads(first))
        # The head waits for the first content (the role chunk has none), and goes out with the
        # status line: the first token does not wait for the producer task, as chat's does not.
        while not any(name == "content_block_delta" for name, _ in head) and (chunk := await anext(chunks, None)) is not None:
            head += stream.feed(fastjson.loads(chunk))
        yield frames(head)
        async for chunk in chunks:
            events = stream.feed(fastjson.loads(chunk))
            if events:
                yield frames(events)
        yield frames(stream.finish())
    except APIError as error:
        yield error_frame(error)
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]


async def _documents_read(messages: list[dict[str, Any]], files: FilesProvider | None) -> list[dict[str, Any]]:
    """PDF documents sent inline read as their text, and files named by id read in, as chat
    completions reads them (few chat models take a PDF)."""
    if any(_part_type(part) == "file" for message in messages for part in _parts(message)):
        messages = await chat_messages_with_files(messages, files)
        for message in messages:
            content = message.get("content")
            if isinstance(content, list):
                message["content"] = [await _pdf_part(part, index) for index, part in enumerate(content)]
    return messages


def _parts(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _part_type(part: Any) -> Any:
    return part.get("type") if isinstance(part, dict) else None


async def _pdf_part(part: Any, index: int) -> Any:
    data_url = part.get("file", {}).get("file_data") if _part_type(part) == "file" else None
    if not isinstance(data_url, str) or not data_url.startswith(PDF_DATA_URL):
        return part
    name = str(part["file"].get("filename") or "document.pdf")
    return {"type": "text", "text": await pdf_as_text(data_url[len(PDF_DATA_URL):], name, f"messages.{index}")}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BuiltinMessagesConfig]) -> AsyncIterator[BuiltinMessages]:
    config = context.config
    seal = ReasoningSeal(lambda: load_key(config.reasoning_key, context.state_dir))
    yield BuiltinMessages(context.deps[Api.inference], context.deps.get(Api.files), seal, context.deps.get(Api.responses))


BUILTIN = ProviderSpec(
    api=Api.messages,
    name="builtin",
    config_model=BuiltinMessagesConfig,
    factory=create,
    requires=(Api.inference,),
    optional=(Api.files, Api.responses),
    description="Anthropic's Messages API (Claude Code, the anthropic SDKs) over any chat-completions model",
)
