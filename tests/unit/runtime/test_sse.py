from collections.abc import AsyncIterator

from runtime.sse import iter_sse_data, sse_frame


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
