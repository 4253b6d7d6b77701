"""Route behaviour that needs a client on the other end: disconnects and stream errors."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any
from pathlib import Path

import httpx2
import pytest
from fastapi import FastAPI

from builder.config import SqliteBackend
from runtime.apis.inference import answers, bodies, routes
from contract.inference.protocol import UpstreamModel, UpstreamRequest
from runtime.apis.inference.router import InferenceRouter
from runtime.apis.inference.store import ChatCompletionStore
from runtime.http.errors import install_error_handlers
from runtime.http.routing import fastapi_router
from runtime.transports.asgi import BackgroundLoop, ThreadedASGITransport
from contract.errors import UpstreamError
from runtime.storage import open_database


class SlowProvider:
    """Answers only after a long wait, and notes when its call is cancelled instead."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    async def list_models(self) -> list[UpstreamModel]:
        return [UpstreamModel("slow")]

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b"{}"

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        yield b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}'
        raise UpstreamError("inference provider 'slow': the stream broke off", code="upstream_stream_error")

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        return b"{}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[httpx2.Client, SlowProvider]]:
    provider = SlowProvider()
    with BackgroundLoop() as loop:
        db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
        store = ChatCompletionStore(db)
        router = InferenceRouter({"slow": provider}, [], store)
        loop.run(store.create_tables())
        loop.run(router.refresh_models())
        app = FastAPI()
        app.include_router(fastapi_router(routes.router(router)), prefix="/v1")
        install_error_handlers(app)
        with httpx2.Client(transport=ThreadedASGITransport(app, loop), base_url="http://app") as client:
            yield client, provider
        loop.run(db.close())


def test_a_client_that_disconnects_cancels_the_upstream_call(served: tuple[httpx2.Client, SlowProvider]) -> None:
    client, provider = served
    body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(httpx2.ReadTimeout):
        client.post("/v1/chat/completions", json=body, timeout=0.3)
    assert provider.cancelled.wait(timeout=5), "the upstream call was still running after the client left"


def test_a_stream_that_breaks_after_it_started_ends_with_an_error_event(served: tuple[httpx2.Client, SlowProvider]) -> None:
    client, _ = served
    body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    events = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[0].startswith('data: {"id":"c"')
    assert '"code": "upstream_stream_error"' in events[1]
    assert "data: [DONE]" not in events


def test_stored_messages_that_are_not_objects_are_listed_as_text() -> None:
    # Stored before messages were checked: listing them must not fail.
    from runtime.apis.inference.stored_routes import _store_messages

    shaped = _store_messages("chatcmpl-1", ["plain", [1, 2], {"role": "user", "content": "ok"}])
    assert [(message["id"], message["content"]) for message in shaped] == [
        ("chatcmpl-1-0", "plain"), ("chatcmpl-1-1", "[1, 2]"), ("chatcmpl-1-2", "ok")]


def test_a_message_longer_than_openais_limit_is_a_400_naming_it() -> None:
    from contract.checks import MAX_STRING
    from contract.errors import InvalidRequestError

    body = {"model": "m", "messages": [{"role": "system", "content": "ok"}, {"role": "user", "content": "x" * (MAX_STRING + 1)}]}
    with pytest.raises(InvalidRequestError) as refused:
        bodies.check_chat_body(body)
    assert (refused.value.param, refused.value.code) == ("messages[1].content", "string_above_max_length")
    bodies.check_chat_body({"model": "m", "messages": [{"role": "user", "content": "x" * MAX_STRING}]})  # at the limit: fine


async def test_a_stream_is_registered_for_the_shutdown_only_while_it_waits_for_its_next_chunk() -> None:
    from runtime.http.middleware import Draining

    draining = Draining()
    registered: list[bool] = []

    async def upstream() -> AsyncIterator[bytes]:
        for index in range(3):
            registered.append(asyncio.current_task() in draining.waiting_tasks())
            yield b'{"n": %d}' % index

    frames = answers.stream_frames(b'{"role": "assistant"}', upstream(), draining)
    seen = []
    async for frame in frames:
        seen.append(frame)
        assert not draining.waiting_tasks()  # between chunks, held by the consumer: nothing to interrupt here
    assert registered == [True, True, True]
    assert seen[-1] == b"data: [DONE]\n\n" and len(seen) == 5
    assert not draining._streams  # unregistered at its end


async def test_a_stream_whose_chunks_another_task_waits_for_registers_that_task() -> None:
    """The head of a stream is made by the response's task, the rest by its producer's (runtime.http.sse)."""
    from runtime.http.middleware import Draining

    draining = Draining()
    waiting: list[set[asyncio.Task[Any]]] = []

    async def upstream() -> AsyncIterator[bytes]:
        for index in range(2):
            waiting.append(draining.waiting_tasks())
            yield b'{"n": %d}' % index

    frames = answers.stream_frames(b'{"role": "assistant"}', upstream(), draining)
    await anext(frames)

    async def next_frame() -> tuple[bytes, asyncio.Task[Any] | None]:
        return await anext(frames), asyncio.current_task()

    for _ in range(2):
        _, task = await asyncio.create_task(next_frame())
        assert waiting[-1] == {task}
    assert [frame async for frame in frames] == [b"data: [DONE]\n\n"]


async def test_a_shutdown_during_the_wait_for_a_chunk_ends_the_stream_with_its_error_event() -> None:
    from runtime.http.middleware import Draining

    draining = Draining()
    waiting = asyncio.Event()

    async def upstream() -> AsyncIterator[bytes]:
        yield b'{"n": 0}'
        waiting.set()
        await asyncio.Event().wait()  # a slow upstream
        yield b'{"n": 1}'

    async def consume() -> list[bytes]:
        return [frame async for frame in answers.stream_frames(b'{"role": "assistant"}', upstream(), draining)]

    consumer = asyncio.create_task(consume())
    await waiting.wait()
    draining.begin()
    draining.end_streams()
    seen = await consumer  # the consumer's task is not cancelled: the stream ends with its error event
    assert seen[:2] == [b'data: {"role": "assistant"}\n\n', b'data: {"n": 0}\n\n']
    assert b"server_shutting_down" in seen[2] and len(seen) == 3
    assert not draining._streams


async def test_a_shutdown_that_comes_between_chunks_ends_the_stream_with_its_error_event() -> None:
    from runtime.http.middleware import Draining

    closed = asyncio.Event()

    async def upstream() -> AsyncIterator[bytes]:
        try:
            for index in range(100):
                yield b'{"n": %d}' % index
        finally:
            closed.set()

    draining = Draining()
    rest = upstream()
    frames = answers.stream_frames(b'{"role": "assistant"}', rest, draining)
    seen = [await anext(frames), await anext(frames)]
    # end_streams interrupts the tasks waiting on their upstream; this stream's was between chunks.
    draining.begin()
    draining.end_streams()
    seen += [frame async for frame in frames]
    assert seen[:2] == [b'data: {"role": "assistant"}\n\n', b'data: {"n": 0}\n\n']
    assert b"server_shutting_down" in seen[2] and len(seen) == 3  # no [DONE]: the answer was cut short
    assert closed.is_set()


async def test_a_stream_broken_by_a_fault_ends_with_an_error_event_not_a_cut(caplog: pytest.LogCaptureFixture) -> None:
    async def upstream() -> AsyncIterator[bytes]:
        yield b'{"n": 0}'
        raise KeyError("a bug")

    seen = [frame async for frame in answers.stream_frames(b'{"role": "assistant"}', upstream(), None)]
    assert seen[:2] == [b'data: {"role": "assistant"}\n\n', b'data: {"n": 0}\n\n'] and len(seen) == 3
    event = json.loads(seen[2].removeprefix(b"data: "))
    assert event["error"]["type"] == "server_error" and "KeyError" not in seen[2].decode()  # no [DONE]: the answer was cut short
    assert any(record.exc_info for record in caplog.records)
