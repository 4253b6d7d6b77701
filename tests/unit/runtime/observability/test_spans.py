"""runtime.observability.spans: a caller's traceparent read as W3C defines it, spans that nest
under the current one, and a span's end handed to its sink as plain values."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.observability.spans import CLIENT, SERVER, Span, current_span, enter_span, leave_span, parse_traceparent


@pytest.mark.parametrize("header, expected", [
    (b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, True)),
    (b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, False)),
    (b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, True)),
    (b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more", None),  # version 00 has four fields
    (b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
    (b"00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
    (b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
    (b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", None),  # upper case is not W3C's
    (b"00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
    (b"garbage", None),
])
def test_a_traceparent_is_read_as_w3c_defines_it(header: bytes, expected: tuple[int, int, bool] | None) -> None:
    assert parse_traceparent(header) == expected


def test_spans_nest_under_the_current_one_and_end_as_plain_values() -> None:
    ended: list[tuple[Any, ...]] = []
    server = Span(ended.append, "POST /v1/x", SERVER, (0xabc, 0xdef), {"url.path": "/v1/x"})
    token = enter_span(server)
    call = Span(ended.append, "chat m", CLIENT, current_span())
    call.set_attribute("gen_ai.response.finish_reasons", ["stop"])
    call.record_exception(ValueError("no"))
    call.set_error("ValueError: no")
    call.end()
    leave_span(token)
    server.end()
    assert current_span() is None
    (name, trace_id, span_id, _, _, parent_id, remote, kind, start, end, attributes, status, description, events, _, _) = ended[0]
    assert (name, trace_id, parent_id, remote, kind) == ("chat m", 0xabc, server.span_id, False, CLIENT)
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",) and (status, description) == (2, "ValueError: no")
    assert events[0][0] == "exception" and events[0][1]["exception.type"] == "ValueError" and end >= start
    assert ended[1][1:3] == (0xabc, server.span_id) and ended[1][5:7] == (0xdef, True)  # the caller's span is the server span's parent
