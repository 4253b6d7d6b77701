"""Prompt-cache breakpoints (`cache: auto`): `cache_control` on the last tool, the last system block,
and the last blocks of the second-to-last and the last user turns, in that order, as many as fit
beside the client's own within Anthropic's 4. A prompt's prefix up to a breakpoint is cached for five
minutes; the next turn of a conversation (or of a tool loop) repeats it and reads it from the cache."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_BREAKPOINTS", "EPHEMERAL", "add_breakpoints", "breakpoints"]

MAX_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}
_UNCACHEABLE = ("thinking", "redacted_thinking")


def breakpoints(body: dict[str, Any]) -> int:
    """How many blocks of a Messages request carry a `cache_control`."""
    blocks = [*(body.get("tools") or ()), *_list(body.get("system"))]
    blocks += [block for message in body.get("messages") or () for block in _list(message.get("content"))]
    return sum(1 for block in blocks if isinstance(block, dict) and block.get("cache_control"))


def add_breakpoints(body: dict[str, Any]) -> None:
    room = MAX_BREAKPOINTS - breakpoints(body)
    users = [message for message in body.get("messages") or () if message["role"] == "user"]
    candidates = [*(body.get("tools") or ())[-1:], *_list(body.get("system"))[-1:]]
    candidates += [_last_cacheable(message["content"]) for message in users[-2:]]
    for block in candidates:
        if room <= 0:
            return
        if block is not None and not block.get("cache_control"):
            block["cache_control"] = dict(EPHEMERAL)
            room -= 1


def _last_cacheable(blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((block for block in reversed(blocks) if block["type"] not in _UNCACHEABLE), None)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
