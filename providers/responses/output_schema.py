"""The schema of a structured output (`text.format` of type `json_schema`), checked as JSON Schema.

OpenAI refuses a schema that is not one (`{"type": "objekt"}`, `"required": "name"`) with a 400
before any model runs; a server that took it would hand the upstream a schema it cannot follow,
or answer with output no validator can hold against it. The check is the metaschema's, by the
`jsonschema` package (the draft the schema names in `$schema`, else 2020-12), imported only when a
request has such a schema.
"""

from __future__ import annotations

import functools
from typing import Any

from contract import fastjson
from contract.errors import InvalidRequestError

__all__ = ["check_output_schema"]


def check_output_schema(text: dict[str, Any] | None) -> None:
    """A 400 naming `text.format.schema` when the json_schema format's schema is not valid JSON
    Schema (its shape, `type` and `name` were checked with the request)."""
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        return
    problem = _schema_problem(fastjson.dumps(fmt["schema"]))
    if problem is not None:
        raise InvalidRequestError(f"Invalid schema for response_format '{fmt.get('name')}': {problem}", param="text.format.schema",
                                  code="invalid_json_schema")


@functools.lru_cache(maxsize=256)
def _schema_problem(schema_json: bytes) -> str | None:
    """What makes the schema (as JSON, so that a client sending the same schema each turn pays
    once) invalid, or None."""
    import jsonschema

    schema = fastjson.loads(schema_json)
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        return f"{error.message[:300]} (at {'/' + where if where else 'the root'})."
    except (TypeError, ValueError, LookupError) as error:  # a $schema naming no draft jsonschema knows, a malformed $ref
        return f"{str(error)[:300]}."
    return None
