"""The adapter every OpenAI-compatible inference provider shares: a pooled httpx2 client that
forwards request bytes and hands back response bytes, mapping failures to OpenAI-shaped errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol

import httpx2
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from contract.spec import ProviderContext
from contract.inference.protocol import UpstreamModel, UpstreamRequest
from contract.errors import UpstreamError
from providers.inference.upstream_errors import default_type, reason, unreachable
from runtime.http.sse import iter_sse_data

__all__ = ["OpenAICompatAdapter", "OpenAICompatConfig", "open_adapter"]

_PASSED_HEADERS = ("retry-after", "retry-after-ms")
_JSON_HEADERS = {"content-type": "application/json"}


class OpenAICompatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1, description="The server's OpenAI-compatible base URL, ending in /v1")
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=300.0, gt=0, description=(
        "Longest wait for an answer, or for a stream's first chunk: a model may work long on a long prompt"))
    stream_gap_timeout_s: float = Field(default=30.0, gt=0, description=(
        "Longest wait between two chunks of a stream once it has started: a stalled stream fails this soon"))
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=256, ge=1)
    headers: dict[str, str] = Field(default_factory=dict, description="Extra headers sent upstream")


class OpenAICompatAdapter:
    """An inference provider over any server that speaks the OpenAI API.

    Requests go straight to the pooled transport with URLs and headers built once: the
    AsyncClient's per-request work (URL parsing, header merging) cost more than the transport."""

    def __init__(self, provider_id: str, transport: httpx2.AsyncBaseTransport, base_url: str,
                 headers: Mapping[str, str], timeout_s: float, connect_timeout_s: float, stream_gap_timeout_s: float = 30.0) -> None:
        self.provider_id = provider_id
        self.transport = transport
        self.timeout_s = timeout_s
        self.stream_gap_timeout_s = stream_gap_timeout_s
        base = base_url.rstrip("/") + "/"
        self._urls = {path: httpx2.URL(base + path) for path in ("chat/completions", "completions", "embeddings", "models")}
        # Host first, as httpx2 would put it (every path shares the base URL's host).
        self._headers = [(b"host", self._urls["models"].netloc),
                         *((k.lower().encode(), v.encode()) for k, v in {**headers, **_JSON_HEADERS}.items())]
        self._timeout = {"connect": connect_timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
        self._stream_timeout = {**self._timeout, "gap": stream_gap_timeout_s}
        # A transport that takes requests already encoded (the stack's own, runtime.transports.fast)
        # is given each POST as its head, built once a path, plus the body: building httpx2's Request
        # and Response objects (each normalizing its headers) cost 8 to 14 µs a call, about a tenth
        # of a proxied request's CPU. Any other transport (a recording one, httpx2's own) gets them.
        prepare = getattr(transport, "prepare", None)
        self._prepared: dict[str, Any] | None = None if prepare is None else {
            path: prepare("POST", self._urls[path], self._headers) for path in ("chat/completions", "completions", "embeddings")}

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        return await self._post("chat/completions", request)

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        return await self._post("embeddings", request)

    def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        return self._stream("chat/completions", request)

    async def completion(self, request: UpstreamRequest) -> bytes:
        return await self._post("completions", request)

    def stream_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        return self._stream("completions", request)

    async def _stream(self, path: str, request: UpstreamRequest) -> AsyncIterator[bytes]:
        body = await self._open(path, request.payload(), self._stream_timeout)
        try:
            async for data in iter_sse_data(aiter(body)):
                # Chunks pass through unparsed; one that cannot be a JSON object (a truncated or
                # garbled event) is the upstream's error, which the client gets as an error event.
                if (not data or data[0] != 0x7B or data[-1] != 0x7D) and not _object_like(data):  # { and }, compared as ints
                    raise UpstreamError(f"inference provider '{self.provider_id}': its stream carried malformed "
                                        f"data, not a JSON object: {data[:120]!r}", status_code=502, code="upstream_malformed")
                yield data
        except httpx2.ReadTimeout as error:
            raise UpstreamError(
                f"inference provider '{self.provider_id}': its stream stalled (nothing within "
                f"{self.timeout_s:g} s of the start, or {self.stream_gap_timeout_s:g} s between chunks)",
                status_code=504, code="upstream_timeout",
            ) from error
        except httpx2.HTTPError as error:
            raise UpstreamError(
                f"inference provider '{self.provider_id}': its stream broke off: {reason(error)}",
                code="upstream_stream_error",
            ) from error
        finally:
            await body.aclose()

    async def list_models(self) -> list[UpstreamModel]:
        response = await self._send(self._request("GET", "models", None))
        try:
            data = json.loads(await response.aread()).get("data") or []
        finally:
            await response.aclose()
        return [_model(item) for item in data if isinstance(item, dict) and item.get("id")]

    async def _post(self, path: str, request: UpstreamRequest) -> bytes:
        body = await self._open(path, request.payload(), self._timeout)
        try:
            parts = [part async for part in body]
            return parts[0] if len(parts) == 1 else b"".join(parts)
        except httpx2.HTTPError as error:
            raise UpstreamError(
                f"inference provider '{self.provider_id}': its answer broke off: {reason(error)}",
                code="upstream_stream_error",
            ) from error
        finally:
            await body.aclose()

    async def _open(self, path: str, payload: bytes, timeout: Mapping[str, float]) -> _Body:
        """POST `payload` to `path`: the body of the upstream's answer, or its error raised."""
        prepared = self._prepared
        if prepared is None:
            return _ResponseBody(await self._send(self._request("POST", path, payload, timeout)))
        try:
            status, headers, stream = await self.transport.send_prepared(prepared[path], payload, timeout)  # type: ignore[attr-defined]
        except httpx2.HTTPError as error:
            raise unreachable(self.provider_id, error, self.timeout_s) from error
        if status < 400 and not any(name.lower() == b"content-encoding" for name, _ in headers):
            return stream  # type: ignore[no-any-return]
        return _ResponseBody(await self._checked(httpx2.Response(status, headers=headers, stream=stream)))

    def _request(self, method: str, path: str, payload: bytes | None, timeout: Mapping[str, float] | None = None) -> httpx2.Request:
        # Built with `stream=` and its headers complete (Host, Content-Length), httpx2 encodes and
        # adds nothing: 10.5 -> 3.2 µs a request. The same headers and body as `content=payload`
        # would give.
        headers = self._headers if payload is None else [*self._headers, (b"content-length", b"%d" % len(payload))]
        request = httpx2.Request(method, self._urls[path], headers=headers, stream=httpx2.ByteStream(payload or b""),
                                 extensions={"timeout": timeout or self._timeout})
        request.read()  # `content` set, as the recording transports read it
        return request

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self.transport.handle_async_request(request)
        except httpx2.HTTPError as error:
            raise unreachable(self.provider_id, error, self.timeout_s) from error
        return await self._checked(response)

    async def _checked(self, response: httpx2.Response) -> httpx2.Response:
        if response.status_code >= 400:
            try:
                await response.aread()
            finally:
                await response.aclose()
            raise _upstream_error(self.provider_id, response)
        return response


class _Body(Protocol):
    """An answer's body, read as it arrives, then closed."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class _ResponseBody:
    """An httpx2.Response's body as a `_Body`."""

    __slots__ = ("chunks", "response")

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self.chunks = _chunks(response)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.chunks

    async def aclose(self) -> None:
        await _close(self.response)


def _chunks(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The body of an answer as it arrives. Read from the transport's stream directly when nothing
    needs decoding: `aiter_bytes` goes through three nested generators (raw, decoded, chunked),
    each closed with its own context manager, which cost about 5 % of a proxied request's CPU,
    and a stream's every read passed through them."""
    if "content-encoding" in response.headers:
        return response.aiter_bytes()
    return aiter(response.stream)  # type: ignore[arg-type]  # an async stream, from an async transport


async def _close(response: httpx2.Response) -> None:
    """`response.aclose()` without the context manager it enters, which only words a transport's error
    with the request (1.4 µs of a proxied request's CPU). The transport's streams do not raise on close."""
    if not response.is_closed:
        response.is_closed = True
        await response.stream.aclose()  # type: ignore[union-attr]  # an async stream, from an async transport


def _upstream_error(provider_id: str, response: httpx2.Response) -> UpstreamError:
    """The upstream's own error, with its status, message, type, param and code kept."""
    try:
        detail: Any = json.loads(response.content).get("error")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str):
        detail = {"message": detail}
    if not isinstance(detail, dict):
        detail = {"message": response.text[:500] or f"HTTP {response.status_code}"}
    headers = {name: response.headers[name] for name in _PASSED_HEADERS if name in response.headers}
    return UpstreamError(
        str(detail.get("message") or f"inference provider '{provider_id}' answered HTTP {response.status_code}"),
        status_code=response.status_code,
        error_type=str(detail.get("type") or default_type(response.status_code)),
        param=detail.get("param") if isinstance(detail.get("param"), str) else None,
        code=str(detail["code"]) if detail.get("code") is not None else None,
        headers=headers,
    )


def _model(item: Mapping[str, Any]) -> UpstreamModel:
    model_id = str(item["id"])
    # The OpenAI models list has no type field; a name is the only hint servers give.
    kind: Literal["llm", "embedding"] = "embedding" if "embed" in model_id.lower() else "llm"
    return UpstreamModel(model_id, int(item.get("created") or 0), str(item.get("owned_by") or ""), kind)


@contextlib.asynccontextmanager
async def open_adapter(context: ProviderContext[OpenAICompatConfig]) -> AsyncIterator[OpenAICompatAdapter]:
    config = context.config
    headers = dict(config.headers)
    if config.api_key is not None and config.api_key.get_secret_value():
        headers["authorization"] = f"Bearer {config.api_key.get_secret_value()}"
    transport = context.http_transport(max_connections=config.max_connections, connect_timeout=config.connect_timeout_s)
    try:
        yield OpenAICompatAdapter(context.provider_id, transport, config.base_url, headers, config.timeout_s, config.connect_timeout_s,
                                  config.stream_gap_timeout_s)
    finally:
        await transport.aclose()


def _object_like(data: bytes) -> bool:
    stripped = data.strip()
    return stripped[:1] == b"{" and stripped[-1:] == b"}"
