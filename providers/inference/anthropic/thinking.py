"""Claude's thinking blocks, carried through chat completions and kept for the turns that come back.

Anthropic signs each `thinking` block (`signature`) and encrypts `redacted_thinking` (`data`); a
conversation that continues after a tool call must hand the last assistant turn's blocks back
unchanged, or the upstream refuses it (with thinking on). Chat completions have no field for them,
so they travel as LiteLLM's convention does: `thinking_blocks` beside `reasoning_content` on the
assistant message (`[{"type": "thinking", "thinking", "signature"}, {"type": "redacted_thinking",
"data"}]`), which a chat client sends back with the message.

The Responses API keeps only the reasoning text (a reasoning item's content, or its encrypted
content, which the stack opens to that text). So the provider also remembers the blocks of each
answer it gave, in a bounded memory keyed by the answer's tool call ids and by a digest of its
reasoning text: a later turn that carries either (the call ids of a function round trip, the
reasoning text of a chain) gets its signed blocks back. The memory is the process's: a chain
continued by another worker or after a restart finds nothing, and the provider then leaves the
thinking out (and turns thinking off for a turn that Anthropic would refuse without it)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["Blocks", "ThinkingMemory", "signed_blocks"]

Blocks = tuple[dict[str, str], ...]


def signed_blocks(value: Any) -> Blocks:
    """The well-formed blocks of a message's `thinking_blocks` (others are left out: Anthropic takes
    no thinking without its signature)."""
    blocks: list[dict[str, str]] = []
    for block in value if isinstance(value, list) else ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "thinking" and isinstance(block.get("signature"), str) and block["signature"]:
            blocks.append({"type": "thinking", "thinking": str(block.get("thinking") or ""), "signature": block["signature"]})
        elif block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str) and block["data"]:
            blocks.append({"type": "redacted_thinking", "data": block["data"]})
    return tuple(blocks)


def _text_key(reasoning: str) -> str:
    return "text:" + hashlib.sha256(reasoning.encode()).hexdigest()


def _size(blocks: Blocks) -> int:
    return sum(len(value) for block in blocks for value in block.values())


class ThinkingMemory:
    """The thinking blocks of recent answers, oldest forgotten first beyond `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Blocks] = OrderedDict()
        self._bytes = 0

    def remember(self, blocks: Sequence[Mapping[str, str]], tool_call_ids: Iterable[str], reasoning: str) -> None:
        kept = signed_blocks(list(blocks))
        if not kept or self.max_bytes <= 0:
            return
        keys = [f"tool:{call_id}" for call_id in tool_call_ids if call_id]
        if reasoning:
            keys.append(_text_key(reasoning))
        for key in keys:
            self._put(key, kept)

    def recall(self, message: Mapping[str, Any]) -> Blocks:
        """The blocks to hand back with an assistant message: its own `thinking_blocks`, else those
        remembered for its tool calls or its reasoning text; none when nothing is known."""
        given = signed_blocks(message.get("thinking_blocks"))
        if given:
            return given
        for call in message.get("tool_calls") or ():
            found = self._get(f"tool:{call.get('id')}") if isinstance(call, Mapping) else None
            if found:
                return found
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            return self._get(_text_key(reasoning)) or ()
        return ()

    def _put(self, key: str, blocks: Blocks) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= _size(old)
        self._entries[key] = blocks
        self._bytes += _size(blocks)
        while self._bytes > self.max_bytes and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= _size(dropped)

    def _get(self, key: str) -> Blocks | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found
