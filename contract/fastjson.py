"""JSON on the hot paths, through pydantic-core's Rust codec.

For the small documents a stream is made of (an event, a chunk) it is five to six times faster
than the standard library's, which matters at 70 events per response. Output is compact UTF-8
(no ASCII escaping); anything not JSON-native raises ValueError.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json, to_json

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> bytes:
    """Compact JSON bytes."""
    return to_json(value)


def loads(data: bytes | bytearray | str) -> Any:
    """The document in `data`; ValueError if it is not valid JSON."""
    return from_json(data)
