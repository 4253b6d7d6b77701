"""Custom tool grammars, read as OpenAI reads them (llguidance's Lark dialect and regular
expressions): what matches, where what does not goes astray, and which definitions are refused."""

from __future__ import annotations

import pytest

from providers.responses.grammars import MAX_GRAMMAR_CHARS, GrammarError, compile_grammar
from support.codex import APPLY_PATCH_GRAMMAR

PATCH = "*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    return 1\n+    return 2\n*** Add File: notes.md\n+\n*** End Patch\n"


def test_a_lark_grammar_with_empty_matching_terminals_accepts_what_it_describes() -> None:
    assert compile_grammar("lark", APPLY_PATCH_GRAMMAR).mismatch(PATCH) is None


def test_a_mismatch_names_the_line_and_column_where_the_input_goes_astray() -> None:
    reason = compile_grammar("lark", APPLY_PATCH_GRAMMAR).mismatch("*** Begin Patch\n*** Rename File: a.py\n*** End Patch\n")
    assert reason == "the input does not match the lark grammar at line 2, column 5, at 'Rename File: a.py\\n*** End Patch\\n'"


def test_an_input_that_stops_early_is_told_apart() -> None:
    reason = compile_grammar("lark", APPLY_PATCH_GRAMMAR).mismatch("*** Begin Patch\n*** Delete File: a.py\n")
    assert reason == "the input ends where the lark grammar expects more (after 38 characters)"


def test_a_regex_grammar_must_match_the_whole_input() -> None:
    phone = compile_grammar("regex", r"\d{3}-\d{4}")
    assert phone.mismatch("555-1234") is None
    assert phone.mismatch("555-12345") == "the input does not match the regex grammar at line 1, column 9, at '5'"
    assert phone.mismatch("555-12") is not None and phone.mismatch("call 555-1234") is not None


def test_positions_count_characters_not_bytes() -> None:
    assert compile_grammar("lark", 'start: "café " /[0-9]+/').mismatch("café 12x") == (
        "the input does not match the lark grammar at line 1, column 8, at 'x'")


@pytest.mark.parametrize(("syntax", "definition", "says"), [
    ("lark", "start: greeting\ngreeting: name", 'unknown name: "name"'),
    ("regex", "(abc", "unclosed group"),
    ("lark", "start ::= !", "lexer error"),
])
def test_a_definition_that_is_not_a_grammar_is_refused_with_the_reason(syntax: str, definition: str, says: str) -> None:
    with pytest.raises(GrammarError, match=says):
        compile_grammar(syntax, definition)


def test_a_definition_past_openais_size_limit_is_refused() -> None:
    with pytest.raises(GrammarError, match="at most"):
        compile_grammar("regex", "a" * (MAX_GRAMMAR_CHARS + 1))


def test_a_grammar_is_compiled_once() -> None:
    assert compile_grammar("lark", APPLY_PATCH_GRAMMAR) is compile_grammar("lark", APPLY_PATCH_GRAMMAR)
