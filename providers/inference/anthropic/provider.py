"""The `anthropic` inference provider: chat completions over Anthropic's Messages API.

Requests go through the transport of `ProviderContext.http_transport` (recorded and replayed like
every remote call), translated by the pure functions of `request`, `response` and `stream`. The
Messages pass-through (`messages`, `stream_messages`) forwards a Messages request's bytes untouched
and gives back the upstream's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

import httpx2

from contract import fastjson
from contract.errors import InvalidRequestError, UpstreamError
from contract.inference.protocol import UpstreamModel, UpstreamRequest, client_betas
from providers.inference.anthropic.config import AnthropicConfig
from providers.inference.anthropic.errors import from_response
from providers.inference.upstream_errors import reason, unreachable
from providers.inference.anthropic.request import Settings, messages_request
from providers.inference.anthropic.response import chat_completion
from providers.inference.anthropic.stream import StreamTranslator
from providers.inference.anthropic.thinking import ThinkingMemory
from runtime.http.sse import iter_sse_data

__all__ = ["AnthropicProvider", "api_base"]

MAX_MODEL_PAGES = 100


def api_base(base_url: str) -> str:
    """The URL the API's paths follow (…/v1), whether `base_url` ends in /v1 or not."""
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


class AnthropicProvider:
    def __init__(self, provider_id: str, transport: httpx2.AsyncBaseTransport, config: AnthropicConfig) -> None:
        self.provider_id = provider_id
        self.transport = transport
        self.config = config
        self.memory = ThinkingMemory(int(config.thinking_memory_mb * 1024 * 1024))
        self.settings = Settings(config.max_tokens, config.cache == "auto", config.thinking, config.thinking_budgets.model_dump())
        self._base = api_base(config.base_url)
        headers = {**config.headers, "anthropic-version": config.anthropic_version, "content-type": "application/json"}
        if config.api_key is not None and config.api_key.get_secret_value():
            headers["x-api-key"] = config.api_key.get_secret_value()
        if config.beta:
            headers["anthropic-beta"] = ",".join(config.beta)
        self._headers = {name.lower(): value for name, value in headers.items()}
        self._timeout = {"connect": config.connect_timeout_s, "read": config.timeout_s, "write": config.timeout_s,
                         "pool": config.timeout_s}
        self._stream_timeout = {**self._timeout, "gap": config.stream_gap_timeout_s}

    # --- chat completions ---------------------------------------------------------------------

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        translation = messages_request(request.body, self.settings, self.memory.recall)
        answer = await self.messages(fastjson.dumps(translation.body), openai_shaped=True)
        try:
            completion = chat_completion(json.loads(answer), translation.schema_tool)
        except (ValueError, TypeError, AttributeError):
            raise self._malformed(answer) from None
        chat_message = completion["choices"][0]["message"]
        self.memory.remember(chat_message.get("thinking_blocks") or (), [call["id"] for call in chat_message.get("tool_calls") or ()],
                             chat_message.get("reasoning_content") or "")
        return fastjson.dumps(completion)

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        translation = messages_request(request.body, self.settings, self.memory.recall, stream=True)
        translator = StreamTranslator(self.provider_id, translation.schema_tool,
                                      include_usage=bool((request.body.get("stream_options") or {}).get("include_usage")))
        response = await self._send("messages", fastjson.dumps(translation.body), self._stream_timeout, openai_shaped=True)
        try:
            async for data in iter_sse_data(_body(response)):
                try:
                    chunks = translator.feed(json.loads(data))
                except (ValueError, TypeError, AttributeError):
                    raise self._malformed(data) from None
                for chunk in chunks:
                    yield fastjson.dumps(chunk)
            translator.ended()
        except httpx2.HTTPError as error:
            raise self._broken(error) from error
        finally:
            await response.aclose()
        self.memory.remember(translator.thinking, translator.calls, "".join(translator.reasoning))

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        raise InvalidRequestError(f"The model '{request.body.get('model')}' does not serve embeddings: Anthropic has no embeddings "
                                  f"API (its provider, '{self.provider_id}', serves chat only).", param="model", code="unsupported_model")

    # --- the Messages API as it is --------------------------------------------------------------

    async def messages(self, body: bytes, *, openai_shaped: bool = False, path: str = "messages") -> bytes:
        """The upstream's answer to a Messages request, both as bytes, untouched; its errors raised
        with their status (a 529 kept, unless `openai_shaped`)."""
        response = await self._send(path, body, self._timeout, openai_shaped=openai_shaped)
        try:
            return await response.aread()
        except httpx2.HTTPError as error:
            raise self._broken(error) from error
        finally:
            await response.aclose()

    async def count_message_tokens(self, body: bytes) -> bytes:
        """Anthropic's own count of a Messages request's input tokens (`POST /v1/messages/count_tokens`,
        which costs nothing), as it answers it."""
        return await self.messages(body, path="messages/count_tokens")

    async def stream_messages(self, body: bytes) -> AsyncIterator[bytes]:
        """The upstream's SSE answer to a streamed Messages request, untouched, one whole event a piece."""
        response = await self._send("messages", body, self._stream_timeout, openai_shaped=False)
        try:
            rest = b""
            async for chunk in _body(response):
                rest += chunk
                end = _frame_end(rest)
                while end:
                    yield rest[:end]
                    rest = rest[end:]
                    end = _frame_end(rest)
            if rest.strip():
                yield rest
        except httpx2.HTTPError as error:
            raise self._broken(error) from error
        finally:
            await response.aclose()

    # --- models ---------------------------------------------------------------------------------

    async def list_models(self) -> list[UpstreamModel]:
        if self.config.models is not None:
            return [UpstreamModel(model, 0, "anthropic") for model in self.config.models]
        models: list[UpstreamModel] = []
        after: str | None = None
        for _ in range(MAX_MODEL_PAGES):
            query = "models?limit=1000" + (f"&after_id={after}" if after else "")
            response = await self._send(query, None, self._timeout, openai_shaped=True, method="GET")
            try:
                page = json.loads(await response.aread())
            finally:
                await response.aclose()
            models += [_model(item) for item in page.get("data") or () if isinstance(item, dict) and item.get("id")]
            after = page.get("last_id")
            if not page.get("has_more") or not after:
                break
        return models

    # --- HTTP -----------------------------------------------------------------------------------

    def _with_betas(self, headers: list[tuple[bytes, bytes]], betas: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
        """The headers with the client's `anthropic-beta` flags after the config's (`beta`), each once."""
        flags = list(dict.fromkeys([*self.config.beta, *betas]))
        return [*(header for header in headers if header[0] != b"anthropic-beta"), (b"anthropic-beta", ",".join(flags).encode())]

    async def _send(self, path: str, payload: bytes | None, timeout: Mapping[str, float], *, openai_shaped: bool,
                    method: str = "POST") -> httpx2.Response:
        url = httpx2.URL(f"{self._base}/{path}")
        headers = [(b"host", url.netloc), *((name.encode(), value.encode()) for name, value in self._headers.items())]
        if not openai_shaped and (betas := client_betas()):  # a client's Messages request, passed through
            headers = self._with_betas(headers, betas)
        if payload is not None:
            headers.append((b"content-length", b"%d" % len(payload)))
        request = httpx2.Request(method, url, headers=headers, stream=httpx2.ByteStream(payload or b""), extensions={"timeout": dict(timeout)})
        request.read()  # `content` set, as the recording transports read it
        try:
            response = await self.transport.handle_async_request(request)
        except httpx2.HTTPError as error:
            raise unreachable(self.provider_id, error, self.config.timeout_s) from error
        if response.status_code >= 400:
            try:
                await response.aread()
            except httpx2.HTTPError as error:
                raise self._broken(error) from error
            finally:
                await response.aclose()
            raise from_response(self.provider_id, response, openai_shaped=openai_shaped)
        return response

    def _broken(self, error: httpx2.HTTPError) -> UpstreamError:
        if isinstance(error, httpx2.ReadTimeout):
            return UpstreamError(f"inference provider '{self.provider_id}': its answer stalled (nothing within {self.config.timeout_s:g} s "
                                 f"of the start, or {self.config.stream_gap_timeout_s:g} s between events)",
                                 status_code=504, code="upstream_timeout")
        return UpstreamError(f"inference provider '{self.provider_id}': its answer broke off: {reason(error)}", code="upstream_stream_error")

    def _malformed(self, data: bytes) -> UpstreamError:
        return UpstreamError(f"inference provider '{self.provider_id}' answered with malformed data, not a Messages answer: "
                             f"{data[:120]!r}", status_code=502, code="upstream_malformed")


def _body(response: httpx2.Response) -> AsyncIterator[bytes]:
    return response.aiter_bytes()


def _frame_end(buffer: bytes) -> int:
    """The end of the first whole SSE event in `buffer` (after its blank line), 0 if none is whole."""
    ends = [index + len(mark) for mark in (b"\n\n", b"\r\n\r\n") if (index := buffer.find(mark)) >= 0]
    return min(ends) if ends else 0


def _model(item: Mapping[str, Any]) -> UpstreamModel:
    created = 0
    if isinstance(item.get("created_at"), str):
        try:
            created = int(datetime.fromisoformat(item["created_at"].replace("Z", "+00:00")).timestamp())
        except ValueError:
            created = 0
    return UpstreamModel(str(item["id"]), created, "anthropic")
