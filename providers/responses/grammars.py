"""The grammars of `custom` tools (`format: {"type": "grammar", "syntax": "lark" | "regex"}`),
checked with llguidance: the engine OpenAI constrains custom tool inputs with, so a grammar
OpenAI takes is taken here with the same meaning (its Lark dialect allows what the `lark` package
refuses, such as terminals that match the empty string, which Codex's apply_patch grammar has).

A chat model is not constrained while it writes a tool's input; its input is checked once whole,
and one that does not match is sent back to the model with the reason (`loop.py`). The matcher
reads the input one byte at a time over a 256-byte vocabulary: no model tokenizer is needed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import llguidance

__all__ = ["Grammar", "GrammarError", "compile_grammar"]

MAX_GRAMMAR_CHARS = 100_000
"""OpenAI's limit on a grammar's definition."""


class GrammarError(ValueError):
    """A definition llguidance cannot compile; the message says where and why."""


@dataclass(frozen=True)
class Grammar:
    syntax: str
    start: llguidance.LLMatcher = field(compare=False)
    """A matcher that has read nothing: each check reads into a copy (copying takes a microsecond,
    making one a millisecond)."""

    def mismatch(self, text: str) -> str | None:
        """Why `text` is not in the grammar's language (where it goes astray), or None if it is."""
        tokens = list(text.encode())
        matcher = self.start.deep_copy()
        if matcher.consume_tokens(tokens) and matcher.is_accepting():
            return None
        if not matcher.is_error():
            return f"the input ends where the {self.syntax} grammar expects more (after {len(text)} characters)"
        accepted = self.start.deep_copy().validate_tokens(tokens)
        good = bytes(tokens[:accepted]).decode(errors="replace")
        line = good.count("\n") + 1
        column = len(good) - (good.rfind("\n") + 1) + 1
        rest = bytes(tokens[accepted:accepted + 40]).decode(errors="replace")
        return f"the input does not match the {self.syntax} grammar at line {line}, column {column}, at {rest!r}"


def compile_grammar(syntax: str, definition: str) -> Grammar:
    """The grammar of a custom tool's `format`; a GrammarError when it is not a valid one."""
    if len(definition) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"the definition is {len(definition)} characters long; at most {MAX_GRAMMAR_CHARS} are allowed")
    return _compiled(syntax, definition)


@functools.lru_cache(maxsize=256)
def _compiled(syntax: str, definition: str) -> Grammar:
    # Agents send the same few grammars with every request: each is compiled and checked once.
    import llguidance

    try:
        compiled = (llguidance.LLMatcher.grammar_from_regex(definition) if syntax == "regex"
                    else llguidance.LLMatcher.grammar_from_lark(definition))
    except ValueError as error:
        raise GrammarError(str(error).strip()) from None
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(compiled, _bytes())
    if failed:
        raise GrammarError(messages[0].strip() if messages else f"not a valid {syntax} grammar")
    return Grammar(syntax, llguidance.LLMatcher(_bytes(), compiled, log_level=0))


class _ByteVocabulary:
    """A tokenizer whose tokens are the 256 bytes, and an end token (llguidance needs one)."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([value]) for value in range(256)] + [b"<|end|>"]
    special_token_ids = [256]

    def __call__(self, text: Any) -> list[int]:
        return list(text if isinstance(text, bytes) else str(text).encode())


@functools.cache
def _bytes() -> llguidance.LLTokenizer:
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary()), slices=[])
