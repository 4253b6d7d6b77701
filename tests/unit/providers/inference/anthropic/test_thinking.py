"""The memory of thinking blocks: found again by a turn's tool call ids or its reasoning text."""

from __future__ import annotations

from providers.inference.anthropic.thinking import ThinkingMemory, signed_blocks

BLOCK = {"type": "thinking", "thinking": "Look it up.", "signature": "sig_1"}
REDACTED = {"type": "redacted_thinking", "data": "opaque"}


def test_blocks_are_found_by_a_tool_call_id_or_by_the_reasoning_text() -> None:
    memory = ThinkingMemory(1 << 20)
    memory.remember([BLOCK, REDACTED], ["toolu_1"], "Look it up.")
    assert memory.recall({"role": "assistant", "tool_calls": [{"id": "toolu_1"}]}) == (BLOCK, REDACTED)
    assert memory.recall({"role": "assistant", "reasoning_content": "Look it up."}) == (BLOCK, REDACTED)
    assert memory.recall({"role": "assistant", "reasoning_content": "Something else."}) == ()


def test_a_messages_own_thinking_blocks_win_and_unsigned_ones_are_left_out() -> None:
    memory = ThinkingMemory(1 << 20)
    memory.remember([BLOCK], ["toolu_1"], "")
    own = {"type": "thinking", "thinking": "Mine.", "signature": "sig_2"}
    message = {"tool_calls": [{"id": "toolu_1"}], "thinking_blocks": [own, {"type": "thinking", "thinking": "unsigned"}, "junk"]}
    assert memory.recall(message) == (own,)
    assert signed_blocks([{"type": "redacted_thinking"}, REDACTED]) == (REDACTED,)


def test_the_oldest_are_forgotten_beyond_the_bound_and_zero_keeps_none() -> None:
    memory = ThinkingMemory(40)
    memory.remember([BLOCK], ["toolu_1"], "")
    memory.remember([{**BLOCK, "signature": "sig_2"}], ["toolu_2"], "")
    assert memory.recall({"tool_calls": [{"id": "toolu_1"}]}) == ()
    assert memory.recall({"tool_calls": [{"id": "toolu_2"}]}) != ()
    none = ThinkingMemory(0)
    none.remember([BLOCK], ["toolu_1"], "Look it up.")
    assert none.recall({"tool_calls": [{"id": "toolu_1"}]}) == ()
