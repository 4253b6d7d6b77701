"""The shared OpenAI-compatible adapter against a real HTTP server: the fake upstream."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from builder.load import parse_config
from builder.resolve import resolve
from fake_upstream.server import FakeUpstream, running_fake_upstream
from providers.inference.openai_compat import OpenAICompatAdapter
from contract.spec import Api
from contract.inference.protocol import UpstreamRequest
from contract.errors import UpstreamError
from runtime.transports.fast import PooledTransport
from runtime.transports.fast.transport import _encode_head, _frame_body
from runtime.transports.clients import TRANSPORT_ENV
from runtime.stack import open_stack


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with running_fake_upstream(api_key="secret") as server:
        yield server


def plan_for(tmp_path: Path, base_url: str, **config: Any) -> Any:
    document = {
        "state_dir": str(tmp_path / "state"),
        "recording": {"mode": "live"},
        "providers": {"inference": [{"provider_id": "up", "provider_type": "vllm",
                                     "config": {"base_url": base_url, "api_key": "secret", **config}}]},
    }
    return resolve(parse_config(document, {}), {})


@pytest.fixture(params=["prepared", "httpx2 objects"])
async def adapter(request: pytest.FixtureRequest, tmp_path: Path, upstream: FakeUpstream,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OpenAICompatAdapter]:
    """Over the stack's transport, which takes requests already encoded, and over httpx2's own,
    which is given httpx2's Request and Response objects (as a recording transport is): both alike."""
    if request.param == "httpx2 objects":
        monkeypatch.setenv(TRANSPORT_ENV, "httpx2")
    async with open_stack(plan_for(tmp_path, upstream.base_url)) as stack:
        adapter = stack.impls[Api.inference].providers["up"]
        assert (adapter._prepared is not None) == (request.param == "prepared")
        yield adapter


def chat(text: str, **extra: Any) -> UpstreamRequest:
    return UpstreamRequest({"model": "fake-model", "messages": [{"role": "user", "content": text}], **extra})


async def test_the_api_key_is_sent_and_the_answer_returned_as_bytes(adapter: OpenAICompatAdapter) -> None:
    answer = json.loads(await adapter.chat_completion(chat("hello")))
    assert answer["choices"][0]["message"]["content"] == "You said: hello"


async def test_every_field_reaches_the_upstream_unchanged(adapter: OpenAICompatAdapter, upstream: FakeUpstream) -> None:
    request = chat("fields", seed=3, top_k=7, response_format={"type": "json_object"}, metadata={"a": "b"})
    await adapter.chat_completion(request)
    assert upstream.bodies()[-1] == dict(request.body)


async def test_client_bytes_are_forwarded_verbatim(adapter: OpenAICompatAdapter, upstream: FakeUpstream) -> None:
    raw = b'{"model":"fake-model","messages":[{"role":"user","content":"raw"}],"x_custom":1}'
    await adapter.chat_completion(UpstreamRequest(json.loads(raw), raw))
    assert upstream.bodies()[-1]["x_custom"] == 1


async def test_streams_yield_chunk_payloads(adapter: OpenAICompatAdapter) -> None:
    chunks = [json.loads(c) async for c in adapter.stream_chat_completion(chat("[tokens:3]", stream=True))]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "tok1 tok2 tok3"


async def test_an_upstream_error_keeps_status_message_type_and_retry_after(adapter: OpenAICompatAdapter) -> None:
    with pytest.raises(UpstreamError) as error:
        await adapter.chat_completion(chat("[error:429]"))
    assert (error.value.status, error.value.error_type, error.value.message) == (429, "rate_limit_error", "fake upstream error 429")
    assert error.value.headers == {"retry-after": "7"}


async def test_an_unknown_upstream_model_is_the_upstreams_404(adapter: OpenAICompatAdapter) -> None:
    with pytest.raises(UpstreamError) as error:
        await adapter.chat_completion(UpstreamRequest({"model": "missing", "messages": [{"role": "user", "content": "x"}]}))
    assert (error.value.status, error.value.code, error.value.param) == (404, "model_not_found", "model")


async def test_a_cut_stream_is_an_error_naming_the_provider(adapter: OpenAICompatAdapter) -> None:
    received = 0
    with pytest.raises(UpstreamError) as error:
        async for _ in adapter.stream_chat_completion(chat("[tokens:10] [cut:3]", stream=True)):
            received += 1
    assert received == 3
    assert error.value.message.startswith("inference provider 'up': its stream broke off")
    assert "127.0.0.1" not in error.value.message  # where the upstream is stays the operator's
    assert error.value.code == "upstream_stream_error" and error.value.status == 502


async def test_a_slow_upstream_hits_the_provider_timeout(tmp_path: Path, upstream: FakeUpstream) -> None:
    async with open_stack(plan_for(tmp_path, upstream.base_url, timeout_s=0.2)) as stack:
        with pytest.raises(UpstreamError) as error:
            await stack.impls[Api.inference].providers["up"].chat_completion(chat("[slow:1000]"))
    assert error.value.status == 504
    assert error.value.message == "inference provider 'up' did not answer within 0.2 s"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_upstream_does_not_stop_the_start_and_is_reported(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    async with open_stack(plan_for(tmp_path, url)) as stack:
        router = stack.impls[Api.inference]
        assert router.health()["up"]["status"] == "unavailable"
        with pytest.raises(UpstreamError) as error:
            await router.providers["up"].chat_completion(chat("hi"))
    assert error.value.status == 502 and error.value.code == "upstream_unreachable"
    assert error.value.message == "inference provider 'up' could not be reached: cannot connect (Connection refused)"


async def test_errors_do_not_tell_clients_where_the_upstream_is_nor_its_credentials(tmp_path: Path) -> None:
    url = f"http://operator:s3cret@127.0.0.1:{closed_port()}/v1"
    async with open_stack(plan_for(tmp_path, url)) as stack:
        with pytest.raises(UpstreamError) as error:
            await stack.impls[Api.inference].providers["up"].chat_completion(chat("hi"))
    assert "s3cret" not in error.value.message and "127.0.0.1" not in error.value.message


@contextlib.asynccontextmanager
async def gzip_upstream(content_type: bytes, content: bytes) -> AsyncIterator[str]:
    """An upstream at the yielded base URL that answers every request with `content`, gzipped."""
    body = gzip.compress(content)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\ncontent-encoding: gzip\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()


async def test_a_compressed_answer_is_decoded(tmp_path: Path) -> None:
    # The fast read skips httpx2's decoders: an upstream that compresses anyway must still be read.
    answer = b'{"id":"c1","object":"chat.completion","choices":[]}'
    async with gzip_upstream(b"application/json", answer) as url, open_stack(plan_for(tmp_path, url)) as stack:
        assert await stack.impls[Api.inference].providers["up"].chat_completion(chat("hi")) == answer


async def test_a_compressed_stream_is_decoded(tmp_path: Path) -> None:
    # Streams take the fast read too: one compressed anyway is decoded, event by event.
    events = b'data: {"id":"c1","choices":[{"delta":{"content":"a"}}]}\n\ndata: {"id":"c1","choices":[]}\n\ndata: [DONE]\n\n'
    async with gzip_upstream(b"text/event-stream", events) as url, open_stack(plan_for(tmp_path, url)) as stack:
        chunks = [chunk async for chunk in stack.impls[Api.inference].providers["up"].stream_chat_completion(chat("hi"))]
    assert chunks == [b'{"id":"c1","choices":[{"delta":{"content":"a"}}]}', b'{"id":"c1","choices":[]}']


def test_upstream_requests_carry_the_headers_and_body_httpx2_would_give(adapter: OpenAICompatAdapter) -> None:
    payload = b'{"model":"fake-model","messages":[]}'
    ours = adapter._request("POST", "chat/completions", payload)
    theirs = httpx2.Request("POST", adapter._urls["chat/completions"], content=payload,
                            headers={"authorization": "Bearer secret", "content-type": "application/json"})
    assert sorted((k.lower(), v) for k, v in ours.headers.raw) == sorted((k.lower(), v) for k, v in theirs.headers.raw)
    assert ours.content == theirs.content == payload
    listing = adapter._request("GET", "models", None)
    assert "content-length" not in listing.headers and listing.headers["host"] == theirs.headers["host"]
    assert listing.content == b""


def test_a_prepared_request_is_the_bytes_of_the_httpx2_request_it_stands_for(adapter: OpenAICompatAdapter) -> None:
    payload = b'{"model":"fake-model","messages":[]}'
    request = adapter._request("POST", "chat/completions", payload)
    url = adapter._urls["chat/completions"]
    prepared = PooledTransport().prepare("POST", url, adapter._headers)
    assert prepared.encode(payload) == _frame_body(_encode_head(request, url.netloc), payload)
    if adapter._prepared:
        assert adapter._prepared["chat/completions"] == prepared
