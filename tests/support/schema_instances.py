"""Request bodies made from a JSON Schema, to hold a route to what its OpenAPI document says.

`candidates(schema, base)` varies one thing at a time in a valid `base` body: each property set to
each value `samples` finds for it (every enum value and `oneOf` branch, bounds at their ends, each
optional field of a nested object) and to each value `breaches` makes (past a bound, outside an
enum, a required field left out, an unknown field where none is allowed, null where it is not), each
field of the base left out, and the values the body's `allOf` rules hinge on. Some values probe for
what the document may have left out: numbers far from zero where it sets no bound, an unknown field
where it allows one. Whether a candidate is valid is the document's to say (`jsonschema`), not this
module's: the test holds the server to it.

The top of a body (its fields, and the items of its arrays) is tried in full; deeper down, `LIMIT`
values of each kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["breaches", "candidates", "samples", "walk"]

LIMIT = 12
"""Values kept per schema (and per branch) below the top: enough for each kind of value, few enough to send them all."""
LONGEST = 10_000
"""A `maxLength` beyond this is not tried (a 10 MB string is the body limit's business)."""
UNKNOWN = "zz_unknown_field"


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema's `oneOf`/`anyOf` branches, each with what the schema says beside them."""
    for key in ("oneOf", "anyOf"):
        if key in schema:
            rest = {name: value for name, value in schema.items() if name != key}
            return [_merged(rest, branch) for branch in schema[key]]
    return []


def _merged(outer: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    """Both schemas' constraints in one (near enough for making values: the validator judges them)."""
    merged = {**outer, **inner}
    if "properties" in outer and "properties" in inner:
        merged["properties"] = {name: {**outer["properties"].get(name, {}), **inner["properties"].get(name, {})}
                                for name in {**outer["properties"], **inner["properties"]}}
    if "required" in outer and "required" in inner:
        merged["required"] = list(dict.fromkeys([*outer["required"], *inner["required"]]))
    return merged


def samples(schema: dict[str, Any], depth: int = 0) -> list[Any]:
    """Values meant to be valid: the first one is the plainest."""
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    keep = LIMIT if depth > 1 else 10**6  # the top of a body (a field, and the items of its arrays) is tried in full
    branches = _branches(schema)
    if branches:  # taken in turns, so that the first few hold one of each branch
        each = [samples(branch, depth)[:keep] for branch in branches]
        return _unique(values[turn] for turn in range(max(map(len, each))) for values in each if turn < len(values))
    found: list[Any] = []
    for kind in _types(schema) or ["string"]:
        found += _typed_samples(kind, schema, depth)
    return _unique(found)[:keep * 2]


def _typed_samples(kind: str, schema: dict[str, Any], depth: int) -> list[Any]:
    if kind == "null":
        return [None]
    if kind == "boolean":
        return [True, False]
    if kind in ("integer", "number"):  # an integer as an integer: the server reads 1.0 as a decimal (FastAPI writes bounds so)
        bounds = [int(schema[bound]) if kind == "integer" else schema[bound] for bound in ("minimum", "maximum") if bound in schema]
        # Far from zero where the schema sets no bound: a bound the route checks and the document lacks shows.
        return [*bounds, *([] if "minimum" in schema else [-1000]), *([] if "maximum" in schema else [10**6])]
    if kind == "string":
        return list(schema.get("examples", ["x" * max(1, schema.get("minLength", 1))]))
    if kind == "array":
        items = samples(schema.get("items", {}), depth + 1) if depth < 6 else []
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        found = [[]] if low == 0 else []
        found += [[item] * max(1, low) for item in (items if depth < 2 else items[:LIMIT])]
        if high is not None and items:
            found.append([items[0]] * high)
        return found
    if kind == "object":
        return _object_samples(schema, depth)
    return []


def _object_samples(schema: dict[str, Any], depth: int) -> list[Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    minimal = {name: (samples(properties.get(name, {}), depth + 1) or ["x"])[0] for name in schema.get("required", [])}
    found = [minimal]
    if schema.get("additionalProperties") is not False:  # a field the route refuses and the document allows shows
        found.append({**minimal, UNKNOWN: 1})
    if depth < 6:
        for name, prop in properties.items():
            found += [{**minimal, name: value} for value in samples(prop, depth + 1)[:LIMIT if depth > 1 else None]]
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and depth < 6:
        found += [{**minimal, "x": value} for value in samples(extra, depth + 1)[:2]]
    return found


def breaches(schema: dict[str, Any], depth: int = 0) -> list[Any]:
    """Values meant to break one rule of `schema` each (the document is the judge)."""
    found: list[Any] = []
    if "const" in schema or "enum" in schema:
        found.append("zz-not-a-choice")
    types = _types(schema)
    if types and "null" not in types and None not in schema.get("enum", []):
        found.append(None)
    keep = LIMIT if depth > 1 else None
    each = [breaches(branch, depth)[:keep] for branch in _branches(schema)]
    found += [values[turn] for turn in range(max(map(len, each), default=0)) for values in each if turn < len(values)]
    for kind in types:
        found += _typed_breaches(kind, schema, depth)
    return _unique(found)


def _typed_breaches(kind: str, schema: dict[str, Any], depth: int) -> list[Any]:
    found: list[Any] = []
    if kind in ("integer", "number"):
        step, number = (1, int) if kind == "integer" else (0.5, float)
        found += [number(schema["minimum"] - step)] if "minimum" in schema else []
        found += [number(schema["maximum"] + step)] if "maximum" in schema else []
    elif kind == "string":
        found += [""] if schema.get("minLength", 0) > 0 else []
        found += ["x" * (schema["maxLength"] + 1)] if schema.get("maxLength", LONGEST) < LONGEST else []
        found += ["!"] if "pattern" in schema else []
    elif kind == "array" and depth < 6:
        items = samples(schema.get("items", {}), depth + 1)
        found += [[]] if schema.get("minItems", 0) > 0 else []
        found += [[items[0]] * (schema["maxItems"] + 1)] if "maxItems" in schema and items else []
        found += [[value] for value in breaches(schema.get("items", {}), depth + 1)[:LIMIT if depth > 1 else None]]
    elif kind == "object" and depth < 6:
        found += _object_breaches(schema, depth)
    return found


def _object_breaches(schema: dict[str, Any], depth: int) -> list[Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", [])
    minimal = {name: (samples(properties.get(name, {}), depth + 1) or ["x"])[0] for name in required}
    found: list[Any] = [{key: value for key, value in minimal.items() if key != name} for name in required]
    if schema.get("additionalProperties") is False:
        found.append({**minimal, UNKNOWN: 1})
    for name, prop in properties.items():
        found += [{**minimal, name: value} for value in breaches(prop, depth + 1)[:LIMIT if depth > 1 else None]]
    extra = schema.get("additionalProperties")
    value = (samples(extra, depth + 1) or ["x"])[0] if isinstance(extra, dict) else "x"
    if "maxProperties" in schema:
        found.append({**minimal, **{f"k{index}": value for index in range(schema["maxProperties"] + 1)}})
    if "maxLength" in schema.get("propertyNames", {}):
        found.append({**minimal, "k" * (schema["propertyNames"]["maxLength"] + 1): value})
    if isinstance(extra, dict):
        found += [{**minimal, "x": bad} for bad in breaches(extra, depth + 1)[:LIMIT]]
    return found


def candidates(schema: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """Bodies around `base` (valid), each a change of one field, or of what one rule hinges on."""
    properties: dict[str, Any] = schema.get("properties", {})
    found: list[dict[str, Any]] = [base, *({key: value for key, value in base.items() if key != name} for name in base)]
    for name, prop in properties.items():
        found += [{**base, name: value} for value in [*samples(prop), *breaches(prop)]]
    found.append({**base, UNKNOWN: 1})
    for rule in schema.get("allOf", []):
        hinge = _satisfying(rule.get("if") or rule.get("not") or {}, properties)
        found.append({**base, **hinge})
        for name, prop in rule.get("then", {}).get("properties", {}).items():
            found += [{**base, **hinge, name: value} for value in [*samples({**properties.get(name, {}), **prop}),
                                                                    *breaches({**properties.get(name, {}), **prop})]]
    return _unique(found)


def _satisfying(condition: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """Values of the fields `condition` names that meet it, each the first sample of the field
    that does."""
    chosen: dict[str, Any] = {}
    for name, wanted in condition.get("properties", {}).items():
        check = Draft202012Validator(wanted)
        value = next((value for value in samples(properties.get(name, {})) if check.is_valid(value)), None)
        if value is not None or check.is_valid(None):
            chosen[name] = value
    return chosen


def _unique(values: Any) -> list[Any]:
    seen: set[str] = set()
    kept = []
    for value in values:
        key = json.dumps(value, sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(value)
    return kept


def walk(value: Any) -> Iterator[dict[str, Any]]:
    """Every object in `value`, itself included."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)
