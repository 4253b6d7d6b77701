"""The OpenAPI document as the server behaves (issue 13, item 10): FastAPI's, amended once.

FastAPI documents what its type hints say: a 422 no route of ours returns (every mistake is a 400
in OpenAI's error shape), no error responses, and path and query parameters without the prefixes,
bounds and enums the routes enforce. This fills that in from the tables below, which name what the
routes check (runtime/apis/common.py), so a client generated from the document or a fuzzer walking
it meets the behaviour it reads. (Routes that read their JSON themselves declare their bodies
beside them, `runtime.apis.common.json_body`, and so do routes whose body model's schema says less
than its checks: the declaration replaces FastAPI's schema of the model.)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["amend"]

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["message", "type"],
        "properties": {
            "message": {"type": "string"},
            "type": {"type": "string"},
            "param": {"type": ["string", "null"]},
            "code": {"type": ["string", "null"]},
        },
    }},
}

_ERRORS = {
    "400": "Invalid request: `param` names the field",
    "401": "No valid credentials (auth on)",
    "404": "No such object, or one the caller may not reach",
    "413": "The body is over the size limit",
    "415": "The body is neither JSON nor, where the route takes one and not from a browser page of another origin, a multipart or URL-encoded form",
    "429": "A quota is exhausted (auth on), or the upstream's rate limit",
    "500": "An error of the server's own (the message carries the request id)",
    "502": "The upstream answered something that is not a valid answer",
    "503": "Shutting down, no active provider, or a verifier or quota store unreachable",
    "504": "The upstream did not answer in time",
}

# Path parameters the routes check the prefix of (validate_id): a wrong kind of id is a 400.
ID_PREFIXES = {"response_id": "resp_", "conversation_id": "conv_", "store_id": "vs_", "batch_id": "vsfb_"}

# The routes whose answer comes from an upstream model, which may fail in its own ways.
_UPSTREAM = frozenset({("post", "/v1/chat/completions"), ("post", "/v1/completions"), ("post", "/v1/embeddings"), ("post", "/v1/responses"),
                       ("post", "/v1/responses/compact"), ("post", "/v1/responses/input_tokens")})

def amend(document: Mapping[str, Any], *, auth: bool, quotas: bool, open_paths: frozenset[str],
          list_limits: Mapping[str, int], form_paths: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`document` (FastAPI's) as the server behaves: see the module's docstring. `list_limits`:
    the largest `limit` of list routes whose bound is not the common 100, by path; `form_paths`:
    the POST routes that also read a form body (runtime.http.forms)."""
    amended = copy.deepcopy(dict(document))
    schemas = amended.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Error"] = ERROR_SCHEMA
    for path, operations in amended.get("paths", {}).items():
        for method, operation in operations.items():
            _amend_operation(path, method, operation, auth=auth and path not in open_paths, quotas=quotas,
                             limit=list_limits.get(path, 100))
            content = operation.get("requestBody", {}).get("content", {})
            _own_body(content)
            if method == "post" and path in form_paths and "application/json" in content:
                content["application/x-www-form-urlencoded"] = content["application/json"]
    _drop_unused(schemas, amended.get("paths", {}))
    return amended


def _own_body(content: dict[str, Any]) -> None:
    """A body a route declares (`runtime.apis.common.json_body`) is the whole body: FastAPI merges
    the declaration into the schema it made of the route's body model, a `$ref` the model's looser
    schema would still apply through, so the `$ref` goes."""
    schema = content.get("application/json", {}).get("schema", {})
    if "$ref" in schema and "properties" in schema:
        del schema["$ref"]


def _drop_unused(schemas: dict[str, Any], paths: Any) -> None:
    """The component schemas nothing refers to any more (the body models replaced above)."""
    used: set[str] = set()
    pending = [paths]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/") and ref[21:] not in used:
                used.add(ref[21:])
                pending.append(schemas.get(ref[21:]))
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    for name in [name for name in schemas if name not in used]:
        del schemas[name]


def _amend_operation(path: str, method: str, operation: dict[str, Any], *, auth: bool, quotas: bool, limit: int) -> None:
    parameters = operation.get("parameters") or []
    for parameter in parameters:
        schema = parameter.setdefault("schema", {})
        name = parameter.get("name")
        if parameter.get("in") == "path" and name in ID_PREFIXES:
            schema["pattern"] = f"^{ID_PREFIXES[name]}"
        elif name == "limit":
            schema.update(minimum=1, maximum=limit)
        elif name == "order":
            schema["enum"] = ["asc", "desc"]
    has_body = "requestBody" in operation
    statuses = {"500", "503"}
    if parameters or has_body:
        statuses.add("400")
    if any(parameter.get("in") == "path" for parameter in parameters) or (method, path) in _UPSTREAM:
        statuses.add("404")  # an unknown object; for a model call, an unknown model
    if has_body:
        statuses |= {"413", "415"}
    if auth:
        statuses.add("401")
    if quotas and auth:
        statuses.add("429")
    if (method, path) in _UPSTREAM:
        statuses |= {"429", "502", "504"}
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)
    for status in sorted(statuses):
        responses.setdefault(status, {"description": _ERRORS[status],
                                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
