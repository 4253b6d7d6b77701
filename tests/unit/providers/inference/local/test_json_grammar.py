"""The grammars that hold a local model to JSON that parses: no raw control character in a string,
bounded whitespace, and strings and arrays the schema leaves open bounded (the schema's own bounds
kept), so that an answer closes within the output cap."""

from __future__ import annotations

import pytest

from providers.inference.local.json_grammar import ARRAY_MAX_ITEMS, OBJECT_GRAMMAR, STRING_MAX_CHARS, bounded_schema, schema_grammar


def test_open_strings_and_arrays_are_bounded_and_the_schemas_own_bounds_kept() -> None:
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "code": {"type": "string", "maxLength": 1000}, "tags": {"type": "array", "items": {"type": "string"}},
        "few": {"type": "array", "maxItems": 3}, "kind": {"type": "string", "enum": ["a", "b"]}, "maybe": {"type": ["string", "null"]},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "type": {"type": "string"},
        "fixed": {"const": {"type": "string"}}}, "$defs": {"item": {"type": "string"}}}
    bounded = bounded_schema(schema)
    properties = bounded["properties"]
    assert properties["name"]["maxLength"] == STRING_MAX_CHARS and properties["code"]["maxLength"] == 1000
    assert properties["tags"]["maxItems"] == ARRAY_MAX_ITEMS and properties["tags"]["items"]["maxLength"] == STRING_MAX_CHARS
    assert properties["few"]["maxItems"] == 3 and "maxLength" not in properties["kind"]
    assert properties["maybe"]["maxLength"] == STRING_MAX_CHARS and properties["either"]["anyOf"][0]["maxLength"] == STRING_MAX_CHARS
    assert properties["type"]["maxLength"] == STRING_MAX_CHARS  # a property named "type" is a property like any other
    assert properties["fixed"] == {"const": {"type": "string"}}  # a value, not a schema: left as it is
    assert bounded["$defs"]["item"]["maxLength"] == STRING_MAX_CHARS
    assert schema["properties"]["name"] == {"type": "string"}  # the client's schema is not changed


def test_a_string_may_hold_no_raw_control_character() -> None:
    pytest.importorskip("llama_cpp")
    grammar = schema_grammar({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    [char] = [line for line in grammar.splitlines() if line.startswith("char ::=")]
    assert r"\x00-\x1F" in char and r"\x7F" in char
    assert r"\x00-\x1F" in OBJECT_GRAMMAR and 'space ::= " "?' in OBJECT_GRAMMAR and 'space ::= " "?' in grammar


def test_the_grammars_are_ones_llama_cpp_reads() -> None:
    pytest.importorskip("llama_cpp")
    from llama_cpp.llama_grammar import LlamaGrammar

    LlamaGrammar.from_string(OBJECT_GRAMMAR, verbose=False)
    LlamaGrammar.from_string(schema_grammar({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
                             verbose=False)
