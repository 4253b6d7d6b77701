import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime.http.sse import HIGH_WATER_BYTES, EventStreamResponse, iter_sse_data, sse_frame


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def collect(*parts: bytes) -> list[bytes]:
    return [data async for data in iter_sse_data(chunks(*parts))]


async def test_events_split_across_network_chunks_are_reassembled() -> None:
    assert await collect(b'data: {"a"', b':1}\n', b'\ndata: {"b":2}\n\n') == [b'{"a":1}', b'{"b":2}']


async def test_done_ends_the_stream() -> None:
    assert await collect(b"data: 1\n\ndata: [DONE]\n\ndata: 2\n\n") == [b"1"]


async def test_crlf_comments_event_names_and_multiline_data() -> None:
    stream = b": keep-alive\r\n\r\nevent: message\r\ndata: a\r\ndata: b\r\n\r\ndata:c\n\n"
    assert await collect(stream) == [b"a\nb", b"c"]


async def test_a_final_event_without_blank_line_is_kept() -> None:
    assert await collect(b"data: last") == []
    assert await collect(b"data: last\n") == [b"last"]


def test_frames_carry_an_optional_event_name() -> None:
    assert sse_frame(b'{"x":1}') == b'data: {"x":1}\n\n'
    assert sse_frame(b"{}", "response.created") == b"event: response.created\ndata: {}\n\n"


# --- EventStreamResponse, driven as an ASGI app ------------------------------------------------


class Client:
    """The server side of one request: records what the response sends, and can go away."""

    def __init__(self, send_delay_s: float = 0.0) -> None:
        self.sent: list[dict[str, Any]] = []
        self.gone = asyncio.Event()
        self.send_delay_s = send_delay_s

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if self.send_delay_s:
            await asyncio.sleep(self.send_delay_s)
        self.sent.append(message)

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body" and m["body"]]

    async def run(self, response: EventStreamResponse) -> None:
        await response({"type": "http", "method": "POST"}, self.receive, self.send)


async def test_frames_ready_together_go_out_in_one_write_and_the_stream_ends() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for burst in range(3):
            await asyncio.sleep(0.01)  # an upstream read
            for index in range(4):
                yield sse_frame(f"{burst}.{index}".encode())

    client = Client()
    await client.run(EventStreamResponse(frames()))
    start = client.sent[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert (b"cache-control", b"no-cache") in start["headers"]
    assert client.bodies == [b"".join(sse_frame(f"{burst}.{i}".encode()) for i in range(4)) for burst in range(3)]
    # The end goes out with the last burst, in the same message (one write).
    assert client.sent[-1] == {"type": "http.response.body", "body": client.bodies[-1], "more_body": False}
    assert len(client.sent) == 4


async def test_a_stream_that_ends_after_a_pause_ends_with_an_empty_message() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield sse_frame(b"0")
        await asyncio.sleep(0.01)  # the upstream's end comes in a read of its own
        await asyncio.sleep(0)

    client = Client()
    await client.run(EventStreamResponse(frames()))
    assert client.bodies == [sse_frame(b"0")]
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_the_first_frames_go_out_with_the_status_line_before_the_rest_of_their_burst_is_made() -> None:
    client = Client()
    made: list[int] = []

    async def frames() -> AsyncIterator[bytes]:
        for index in range(5):  # one burst: nothing in it waits
            made.append(len(client.sent))  # what had been sent when this frame was made
            yield sse_frame(str(index).encode())

    await client.run(EventStreamResponse(frames(), flush_after=2))
    assert made == [0, 0, 2, 2, 2]  # the head before anything went out; the rest after it had
    assert [m["type"] for m in client.sent[:2]] == ["http.response.start", "http.response.body"]
    assert client.bodies == [sse_frame(b"0") + sse_frame(b"1"), b"".join(sse_frame(str(i).encode()) for i in range(2, 5))]


async def test_a_stream_shorter_than_its_head_is_sent_whole_and_ended() -> None:
    client = Client()
    await client.run(EventStreamResponse(chunks(sse_frame(b"only")), flush_after=2))
    assert client.bodies == [sse_frame(b"only")]
    assert client.sent[-1]["more_body"] is False and client.sent[0]["type"] == "http.response.start"
    empty = Client()
    await empty.run(EventStreamResponse(chunks(), flush_after=2))
    assert [m["type"] for m in empty.sent] == ["http.response.start", "http.response.body"] and empty.sent[-1]["more_body"] is False


async def test_an_error_while_the_head_is_made_comes_before_the_status_line() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield sse_frame(b"role")
        raise RuntimeError("upstream broke")

    client = Client()
    with pytest.raises(RuntimeError, match="upstream broke"):
        await client.run(EventStreamResponse(frames(), flush_after=2))
    assert client.sent == []  # the app's error handling still answers with a status of its own


async def test_a_client_that_goes_away_while_the_head_is_made_cancels_it_and_nothing_is_sent() -> None:
    cancelled = asyncio.Event()
    closed = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield sse_frame(b"role")
            try:
                await asyncio.sleep(60)  # an upstream that has not sent its first token
            except asyncio.CancelledError:
                cancelled.set()
                raise
            yield sse_frame(b"never")
        finally:
            closed.set()

    client = Client()
    running = asyncio.create_task(client.run(EventStreamResponse(frames(), flush_after=2)))
    await asyncio.sleep(0.02)
    client.gone.set()
    await asyncio.wait_for(running, 2)  # returns: a client that left is no error
    assert cancelled.is_set() and closed.is_set()
    assert client.sent == []


async def test_lines_are_found_wherever_the_network_splits_them() -> None:
    stream = b": c\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: e\ndata: x\ndata: y\n\ndata:z\n\ndata: [DONE]\n\n"
    expected = [b'{"a":1}', b"x\ny", b"z"]
    for size in range(1, len(stream) + 1):
        parts = [stream[at:at + size] for at in range(0, len(stream), size)]
        assert await collect(*parts) == expected, size


async def test_a_client_that_goes_away_cancels_the_producer_where_it_waits() -> None:
    cancelled = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        yield sse_frame(b"first")
        try:
            await asyncio.sleep(60)  # a slow upstream
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield sse_frame(b"never")

    client = Client()
    running = asyncio.create_task(client.run(EventStreamResponse(frames())))
    await asyncio.sleep(0.02)
    client.gone.set()
    await asyncio.wait_for(running, 2)
    assert cancelled.is_set()
    assert client.bodies == [sse_frame(b"first")]
    assert not any(m.get("more_body") is False for m in client.sent)  # no end: the client is gone


async def test_cancelling_the_response_cancels_the_producer() -> None:
    # The library client cancels the app's task when its reader closes the stream.
    cancelled = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield b""

    running = asyncio.create_task(Client().run(EventStreamResponse(frames())))
    await asyncio.sleep(0.02)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.sleep(0)
    assert cancelled.is_set()


async def test_a_producer_error_reaches_the_app_after_the_frames_before_it() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield sse_frame(b"ok")
        raise RuntimeError("bug")

    client = Client()
    with pytest.raises(RuntimeError, match="bug"):
        await client.run(EventStreamResponse(frames()))
    assert client.bodies == [sse_frame(b"ok")]
    assert not any(m.get("more_body") is False for m in client.sent)  # not ended as if whole


async def test_a_slow_client_holds_the_producer_back_at_the_high_water_mark() -> None:
    frame = b"x" * 1024
    produced = 0

    async def frames() -> AsyncIterator[bytes]:
        nonlocal produced
        for _ in range(4 * HIGH_WATER_BYTES // len(frame)):
            produced += 1
            yield frame

    client = Client(send_delay_s=0.05)
    running = asyncio.create_task(client.run(EventStreamResponse(frames())))
    await asyncio.sleep(0.02)  # the first send is under way; the producer ran until it was held
    assert produced * len(frame) <= HIGH_WATER_BYTES + len(frame)
    await asyncio.wait_for(running, 5)
    assert b"".join(client.bodies) == frame * (4 * HIGH_WATER_BYTES // len(frame))
