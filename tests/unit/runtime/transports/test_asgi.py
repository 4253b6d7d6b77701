"""The in-process ASGI transports, exercised against real Starlette apps and the openai SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from runtime.transports.asgi import (
    AsyncThreadedASGITransport,
    BackgroundLoop,
    Message,
    Receive,
    Scope,
    Send,
    ThreadedASGITransport,
)

BASE_URL = "http://stack.local"
# Bounds every wait in this file, so a regression fails instead of hanging.
WAIT_S = 2.0


class Probe:
    """Lets a test drive and observe the app running on the background loop."""

    def __init__(self, bg: BackgroundLoop) -> None:
        self._bg = bg
        self._gate = asyncio.Event()  # only touched on the background loop
        self.gate_opened = threading.Event()
        self.finalized = threading.Event()
        self.produced = 0

    def open_gate(self) -> None:
        self.gate_opened.set()
        self._bg.loop.call_soon_threadsafe(self._gate.set)

    async def wait_for_gate(self) -> None:
        await asyncio.wait_for(self._gate.wait(), WAIT_S)


def make_app(probe: Probe) -> Starlette:
    async def echo(request: Request) -> Response:
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "headers": dict(request.headers),
                "body": (await request.body()).decode(),
                "thread": threading.current_thread().name,
            }
        )

    async def gated(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"chunk-1"
            await probe.wait_for_gate()
            yield b"chunk-2"

        return StreamingResponse(chunks())

    async def endless(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            try:
                yield b"first"
                await asyncio.Event().wait()
            finally:
                probe.finalized.set()

        return StreamingResponse(chunks())

    async def flood(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(200):
                probe.produced += 1
                yield b"x"

        return StreamingResponse(chunks())

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    async def boom_mid_stream(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"partial"
            raise RuntimeError("mid-stream boom")

        return StreamingResponse(chunks())

    async def chat_completions(request: Request) -> Response:
        body = await request.json()

        def sse(content: str) -> bytes:
            chunk = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}],
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        async def events() -> AsyncIterator[bytes]:
            yield sse("Hel")
            await probe.wait_for_gate()
            yield sse("lo")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["GET", "POST", "PUT"]),
            Route("/gated", gated),
            Route("/endless", endless),
            Route("/flood", flood),
            Route("/boom", boom),
            Route("/boom-mid-stream", boom_mid_stream),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
    )


async def raise_before_start(scope: Scope, receive: Receive, send: Send) -> None:
    raise LookupError("no response at all")


@pytest.fixture
def bg() -> Iterator[BackgroundLoop]:
    with BackgroundLoop() as loop:
        yield loop


@pytest.fixture
def probe(bg: BackgroundLoop) -> Probe:
    return Probe(bg)


@pytest.fixture
def client(bg: BackgroundLoop, probe: Probe) -> Iterator[httpx2.Client]:
    transport = ThreadedASGITransport(make_app(probe), bg)
    with httpx2.Client(transport=transport, base_url=BASE_URL) as c:
        yield c


@pytest.fixture
async def aclient(bg: BackgroundLoop, probe: Probe) -> AsyncIterator[httpx2.AsyncClient]:
    transport = AsyncThreadedASGITransport(make_app(probe), bg)
    async with httpx2.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


def other_tasks_on(bg: BackgroundLoop) -> int:
    """Tasks still alive on the background loop once finishing ones have had time to end."""

    async def count() -> int:
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others, timeout=WAIT_S)
        return sum(not task.done() for task in others)

    return bg.run(count(), timeout=WAIT_S * 2)


async def spin(iterations: int = 200) -> None:
    for _ in range(iterations):
        await asyncio.sleep(0)


def assert_echo(response: httpx2.Response) -> None:
    assert response.status_code == 200
    echoed = response.json()
    assert echoed["method"] == "PUT"
    assert echoed["path"] == "/echo"
    assert echoed["query"] == "a=1&b=two"
    assert echoed["headers"]["x-custom"] == "Value"
    assert echoed["body"] == "payload"
    assert echoed["thread"] == "stack-asgi-loop"


# --- scope and plain requests ------------------------------------------------


def test_scope_is_a_complete_asgi3_http_scope(bg: BackgroundLoop) -> None:
    seen: list[Scope] = []
    received: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        received.append(await receive())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with httpx2.Client(transport=ThreadedASGITransport(app, bg, client=("10.0.0.1", 5000))) as c:
        assert c.post("https://stack.local/v1/a%20b?x=1", headers={"X-Up": "A"}, content=b"hi").status_code == 204

    scope = seen[0]
    assert scope["type"] == "http"
    assert scope["asgi"]["version"] == "3.0"
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "POST"
    assert (b"x-up", b"A") in scope["headers"]
    assert all(name == name.lower() and isinstance(name, bytes) for name, _ in scope["headers"])
    assert scope["scheme"] == "https"
    assert scope["path"] == "/v1/a b"
    assert scope["raw_path"] == b"/v1/a%20b"
    assert scope["query_string"] == b"x=1"
    assert scope["server"] == ("stack.local", 443)
    assert scope["client"] == ("10.0.0.1", 5000)
    assert scope["root_path"] == ""
    assert received == [{"type": "http.request", "body": b"hi", "more_body": False}]


def test_sync_echo_round_trip(client: httpx2.Client) -> None:
    response = client.put("/echo", params={"a": 1, "b": "two"}, headers={"X-Custom": "Value"}, content=b"payload")
    assert_echo(response)


async def test_async_echo_round_trip(aclient: httpx2.AsyncClient) -> None:
    response = await aclient.put("/echo", params={"a": 1, "b": "two"}, headers={"X-Custom": "Value"}, content=b"payload")
    assert_echo(response)


def test_head_request_has_no_body(client: httpx2.Client) -> None:
    response = client.head("/echo")
    assert response.status_code == 200
    assert int(response.headers["content-length"]) > 0
    assert response.content == b""


# --- incremental streaming ---------------------------------------------------


def test_sync_stream_arrives_chunk_by_chunk(client: httpx2.Client, probe: Probe) -> None:
    with client.stream("GET", "/gated") as response:
        chunks = response.iter_raw()
        assert next(chunks) == b"chunk-1"
        # chunk 2 cannot exist yet: the app waits for the gate we open only now.
        assert not probe.gate_opened.is_set()
        probe.open_gate()
        assert list(chunks) == [b"chunk-2"]


async def test_async_stream_arrives_chunk_by_chunk(aclient: httpx2.AsyncClient, probe: Probe) -> None:
    async with aclient.stream("GET", "/gated") as response:
        chunks = response.aiter_raw()
        assert await anext(chunks) == b"chunk-1"
        assert not probe.gate_opened.is_set()
        probe.open_gate()
        assert [chunk async for chunk in chunks] == [b"chunk-2"]


def test_unread_stream_applies_backpressure(client: httpx2.Client, probe: Probe, bg: BackgroundLoop) -> None:
    with client.stream("GET", "/flood") as response:
        chunks = response.iter_raw()
        next(chunks)
        bg.run(spin())  # give the producer every chance to run ahead
        assert probe.produced < 50
        assert sum(len(chunk) for chunk in chunks) == 199
    assert probe.produced == 200


# --- early close -------------------------------------------------------------


def test_sync_early_close_cancels_the_app(client: httpx2.Client, probe: Probe, bg: BackgroundLoop) -> None:
    threads_before = threading.active_count()
    with client.stream("GET", "/endless") as response:
        assert next(response.iter_raw()) == b"first"
    assert probe.finalized.wait(WAIT_S)
    assert other_tasks_on(bg) == 0
    assert threading.active_count() == threads_before


async def test_async_early_close_cancels_the_app(aclient: httpx2.AsyncClient, probe: Probe, bg: BackgroundLoop) -> None:
    async with aclient.stream("GET", "/endless") as response:
        assert await anext(response.aiter_raw()) == b"first"
    assert await asyncio.to_thread(probe.finalized.wait, WAIT_S)
    assert await asyncio.to_thread(other_tasks_on, bg) == 0


def test_stopping_the_loop_fails_an_open_stream(client: httpx2.Client, bg: BackgroundLoop) -> None:
    with client.stream("GET", "/endless") as response:
        chunks = response.iter_raw()
        next(chunks)
        bg.stop()
        with pytest.raises(httpx2.ReadError):
            next(chunks)


# --- app errors --------------------------------------------------------------


def test_sync_exception_before_start_is_reraised(bg: BackgroundLoop) -> None:
    with httpx2.Client(transport=ThreadedASGITransport(raise_before_start, bg), base_url=BASE_URL) as c:
        with pytest.raises(LookupError, match="no response at all"):
            c.get("/")


async def test_async_exception_before_start_is_reraised(bg: BackgroundLoop) -> None:
    transport = AsyncThreadedASGITransport(raise_before_start, bg)
    async with httpx2.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        with pytest.raises(LookupError, match="no response at all"):
            await c.get("/")


def test_starlette_error_is_a_500_and_the_reraise_is_logged(
    client: httpx2.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="runtime.transports.asgi"):
        response = client.get("/boom")
        assert response.status_code == 500
        # Starlette re-raises after sending its 500; that happens just after the body ends.
        assert client.get("/echo").status_code == 200
    assert any(isinstance(r.exc_info and r.exc_info[1], RuntimeError) for r in caplog.records)


def test_sync_exception_mid_stream_is_a_read_error(client: httpx2.Client) -> None:
    with client.stream("GET", "/boom-mid-stream") as response:
        assert response.status_code == 200
        with pytest.raises(httpx2.ReadError) as caught:
            response.read()
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_async_exception_mid_stream_is_a_read_error(aclient: httpx2.AsyncClient) -> None:
    async with aclient.stream("GET", "/boom-mid-stream") as response:
        with pytest.raises(httpx2.ReadError):
            await response.aread()


# --- loops -------------------------------------------------------------------


def test_async_transport_from_several_event_loops(bg: BackgroundLoop, probe: Probe) -> None:
    transport = AsyncThreadedASGITransport(make_app(probe), bg)

    async def call() -> Any:
        async with httpx2.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            return (await c.get("/echo")).json()["thread"]

    results = [asyncio.run(call()), asyncio.run(call())]
    worker = threading.Thread(target=lambda: results.append(asyncio.run(call())))
    worker.start()
    worker.join(WAIT_S)
    assert results == ["stack-asgi-loop"] * 3


def test_background_loop_lifecycle() -> None:
    bg = BackgroundLoop()
    with pytest.raises(RuntimeError):
        _ = bg.loop
    bg.start()
    bg.start()

    async def where() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    assert bg.run(where()) is bg.loop
    assert bg.submit(where()).result(WAIT_S) is bg.loop
    with pytest.raises(TimeoutError):
        bg.run(asyncio.sleep(10), timeout=0.01)
    assert other_tasks_on(bg) == 0

    bg.stop()
    bg.stop()
    assert bg.loop.is_closed()
    with pytest.raises(RuntimeError):
        bg.run(where())
    with pytest.raises(RuntimeError):
        bg.start()


# --- through the openai SDK --------------------------------------------------


def chat_request() -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_openai_sdk_sync_stream_is_incremental(bg: BackgroundLoop, probe: Probe) -> None:
    http_client = httpx2.Client(transport=ThreadedASGITransport(make_app(probe), bg))
    sdk = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key="x", http_client=http_client, max_retries=0)
    with sdk:
        stream = sdk.chat.completions.create(**chat_request())
        first = next(stream)
        assert first.choices[0].delta.content == "Hel"
        assert not probe.gate_opened.is_set()
        probe.open_gate()
        assert [c.choices[0].delta.content for c in stream] == ["lo"]


async def test_openai_sdk_async_stream_is_incremental(bg: BackgroundLoop, probe: Probe) -> None:
    http_client = httpx2.AsyncClient(transport=AsyncThreadedASGITransport(make_app(probe), bg))
    sdk = openai.AsyncOpenAI(base_url=f"{BASE_URL}/v1", api_key="x", http_client=http_client, max_retries=0)
    async with sdk:
        stream = await sdk.chat.completions.create(**chat_request())
        first = await anext(stream)
        assert first.choices[0].delta.content == "Hel"
        assert not probe.gate_opened.is_set()
        probe.open_gate()
        assert [c.choices[0].delta.content async for c in stream] == ["lo"]


def test_openai_sdk_stream_close_cancels_the_app(bg: BackgroundLoop, probe: Probe) -> None:
    http_client = httpx2.Client(transport=ThreadedASGITransport(make_app(probe), bg))
    sdk = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key="x", http_client=http_client, max_retries=0)
    with sdk:
        stream = sdk.chat.completions.create(**chat_request())
        next(stream)
        stream.close()
    assert other_tasks_on(bg) == 0
