"""What a messages provider implements: Anthropic's Messages API (`POST /v1/messages`), served by
the built-in provider over the inference router, so that Claude Code and the `anthropic` SDKs
reach any model the stack serves.

Bodies are Anthropic's wire format: the request as the client sent it (parsed, and its bytes, so a
provider may forward them untouched), the answer as bytes. Client mistakes raise
`contract.errors.APIError`s (worded as Anthropic words them, `param` naming the field) before
anything is streamed; the routes answer them in Anthropic's error envelope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

__all__ = ["MessagesProvider"]


@runtime_checkable
class MessagesProvider(Protocol):
    async def create_message(self, body: dict[str, Any], raw: bytes) -> bytes:
        """The `Message` JSON answering a non-streamed request."""
        ...

    async def stream_message(self, body: dict[str, Any], raw: bytes) -> AsyncIterator[bytes]:
        """The answer's server-sent events (`event: message_start` ... `message_stop`), each
        frame whole. Awaited before the first frame, so a request refused is raised, not streamed."""
        ...

    async def count_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{"input_tokens": N}` for the request the body would make (no `max_tokens` needed)."""
        ...
