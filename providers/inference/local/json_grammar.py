"""JSON a small model cannot get wrong: the GBNF grammars that hold a llama.cpp model's answer to
`response_format` (and its tool calls' arguments) make it JSON that parses, within the output cap.

llama-cpp-python's JSON-schema converter lets a string hold raw control characters (a raw newline
is not JSON), and a small model that never closes a string runs on through newlines and prose
until its token limit: `{ "city" : "Paris }\\nThe capital of France is…`. So here:

- a string holds no raw control character (`\\n` is written escaped, as JSON has it);
- between tokens, one space at most (the compact JSON OpenAI's models write; a model that
  pretty-prints spends a token on each newline and indent);
- a string the schema does not bound is bounded to `STRING_MAX_CHARS` characters, and an array to
  `ARRAY_MAX_ITEMS` items (the schema's own `maxLength` and `maxItems` are kept, larger or not):
  every answer still validates against the schema, and a model that rambles is made to close what
  it opened long before the output cap (`default_max_tokens`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["ARRAY_MAX_ITEMS", "OBJECT_GRAMMAR", "OBJECT_MAX_MEMBERS", "STRING_MAX_CHARS", "bounded_schema", "schema_grammar"]

STRING_MAX_CHARS = 200
ARRAY_MAX_ITEMS = 16

_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_CHAR_RULE = re.compile(r"^char ::= .*$", re.MULTILINE)

OBJECT_MAX_MEMBERS = 8

OBJECT_GRAMMAR = rf"""root ::= "{{" space ( member1 ( "," space member1 ){{0,{OBJECT_MAX_MEMBERS - 1}}} )? "}}" space
member1 ::= string ":" space value1
value1 ::= object2 | array2 | scalar
object2 ::= "{{" space ( member2 ( "," space member2 ){{0,{OBJECT_MAX_MEMBERS - 1}}} )? "}}" space
member2 ::= string ":" space value2
array2 ::= "[" space ( value2 ( "," space value2 ){{0,{OBJECT_MAX_MEMBERS - 1}}} )? "]" space
value2 ::= object3 | array3 | scalar
object3 ::= "{{" space ( member3 ( "," space member3 ){{0,{OBJECT_MAX_MEMBERS - 1}}} )? "}}" space
member3 ::= string ":" space scalar
array3 ::= "[" space ( scalar ( "," space scalar ){{0,{OBJECT_MAX_MEMBERS - 1}}} )? "]" space
scalar ::= string | number | ("true" | "false" | "null") space
string ::= "\"" char{{0,{STRING_MAX_CHARS}}} "\"" space
{_CHAR}
number ::= "-"? ([0-9] | [1-9] [0-9]{{1,15}}) ("." [0-9]{{1,16}})? ([eE] [-+]? [0-9]{{1,4}})? space
space ::= " "?
"""
"""`response_format: json_object`: a JSON object three levels deep at most (objects and arrays
within it hold values, and those within them scalars), `OBJECT_MAX_MEMBERS` members or items at
each level. Without a schema, a small model pretty-prints and nests without end (a weather report
as arrays of arrays, one newline and indent a token, past 500 tokens)."""

# Keywords whose value is a schema, a list of schemas, or a mapping of names to schemas.
_SCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "unevaluatedItems", "unevaluatedProperties")
_SCHEMAS = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def schema_grammar(schema: Mapping[str, Any]) -> str:
    """GBNF for a JSON Schema, bounded as the module says. The converter's own errors (a `$ref` it
    cannot follow...) are the caller's to report."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return _CHAR_RULE.sub(lambda _: _CHAR, str(json_schema_to_gbnf(json.dumps(bounded_schema(schema)))))


def bounded_schema(schema: Any) -> Any:
    """`schema` with `maxLength` on every string and `maxItems` on every array that has none."""
    if not isinstance(schema, Mapping):
        return schema
    bounded: dict[str, Any] = dict(schema)
    for key in _SCHEMA:
        if isinstance(schema.get(key), Mapping):
            bounded[key] = bounded_schema(schema[key])
    for key in _SCHEMAS:
        if isinstance(schema.get(key), list):
            bounded[key] = [bounded_schema(item) for item in schema[key]]
    for key in _NAMED:
        if isinstance(schema.get(key), Mapping):
            bounded[key] = {name: bounded_schema(item) for name, item in schema[key].items()}
    kinds = schema.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "string" in kinds and not {"maxLength", "enum", "const", "pattern", "format"} & schema.keys():
        bounded["maxLength"] = STRING_MAX_CHARS
    if "array" in kinds and "maxItems" not in schema:
        bounded["maxItems"] = ARRAY_MAX_ITEMS
    return bounded
