"""The Responses bodies as the OpenAPI document declares them (issue 45): what
`CreateResponse.check` and `CompactRequest.check` (contract/responses/models.py), the input items'
checks (`runtime.apis.item_schema`) and the request's preparation refuse, and nothing they take.

FastAPI would document the pydantic models, whose types say less than their checks; these
schemas replace them (`openapi_extra`, runtime/app/openapi.py). A create body's fields are
`RESPONSE_FIELDS`, no others (an unknown one is a 400 `unknown_parameter`); the checks that tie
fields together are its `allOf`. What no schema can say (an id that names a stored object, a tool
type or guardrail this stack serves, a tool choice naming one of the request's tools, a sealed
token, a grammar that compiles, a JSON Schema that is one) is in the descriptions.
"""

from __future__ import annotations

from typing import Any

from contract.checks import MAX_STRING
from contract.items import INCLUDABLE
from contract.responses.models import _EFFORTS, _TOOL_CHOICE_TYPES, SUMMARIES
from runtime.apis.common import METADATA_SCHEMA, json_body
from runtime.apis.item_schema import item_schema

__all__ = ["COMPACT_BODY", "COUNT_BODY", "CREATE_BODY"]

_TEXT = {"type": ["string", "null"]}
_FLAG = {"type": ["boolean", "null"]}
_OBJECT = {"type": ["object", "null"]}
_NAMED = {"type": "string", "minLength": 1}
_SCHEMA_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$", "examples": ["answer"]}
_PREVIOUS = {"type": ["string", "null"], "pattern": "^resp", "examples": ["resp_0123"],
             "description": "a stored response's id (one not found is a 400 previous_response_not_found)"}
_CONVERSATION_ID = {"type": "string", "pattern": "^conv", "examples": ["conv_0123"]}
_NOT_NULL = {"not": {"type": "null"}}


def _number(low: float, high: float | None = None, *, integer: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["integer" if integer else "number", "null"], "minimum": low}
    if high is not None:
        schema["maximum"] = high
    return schema


def _function() -> dict[str, Any]:
    return {"type": "object", "title": "function", "required": ["type", "name"],
            "properties": {"type": {"const": "function"}, "name": _NAMED, "parameters": _OBJECT}}


_CUSTOM_FORMAT = {"anyOf": [
    {"type": "null"},
    {"type": "object", "required": ["type"], "properties": {"type": {"const": "text"}}},
    {"type": "object", "required": ["type", "syntax", "definition"], "properties": {
        "type": {"const": "grammar"}, "syntax": {"enum": ["lark", "regex"]},
        "definition": {"type": "string", "minLength": 1, "description": "a grammar of `syntax` (one that does not compile is a 400)"}}},
]}
_CLIENT_TOOLS = ("function", "custom", "namespace", "tool_search", "apply_patch", "shell", "local_shell")
"""The tools the client runs (providers/responses/client_tools.py CLIENT_TOOL_TYPES): served by every stack."""

_TOOL = {"oneOf": [
    _function(),
    {"type": "object", "title": "custom", "required": ["type", "name"],
     "properties": {"type": {"const": "custom"}, "name": _NAMED, "format": _CUSTOM_FORMAT}},
    {"type": "object", "title": "namespace", "required": ["type", "name", "tools"], "properties": {
        "type": {"const": "namespace"}, "name": _NAMED, "tools": {"type": "array", "minItems": 1, "items": {"oneOf": [
            _function(), {"type": "object", "required": ["type", "name"], "properties": {"type": {"const": "custom"}, "name": _NAMED}}]}}}},
    {"type": "object", "title": "tool_search", "required": ["type", "execution"],
     "properties": {"type": {"const": "tool_search"}, "execution": {"const": "client"}}},
    {"type": "object", "title": "apply_patch, shell, local_shell", "required": ["type"],
     "properties": {"type": {"enum": ["apply_patch", "shell", "local_shell"]}}},
    {"type": "object", "title": "server-side tool", "required": ["type"],
     "properties": {"type": {"type": "string", "minLength": 1, "not": {"enum": list(_CLIENT_TOOLS)}}},
     "description": "a type a tool_runtime provider of this stack serves (mcp, file_search, web_search...: GET /v1/providers), "
                    "checked by it; any other is a 400 unsupported_tool_type (or, with the responses provider's `unserved_tools: "
                    "omit`, left out of the model's view)"},
], "description": "the model names of the request's tools must differ"}

_TOOL_CHOICE = {"anyOf": [
    {"enum": ["none", "auto", "required", None]},
    {"type": "object", "title": "function", "required": ["type", "name"], "properties": {"type": {"const": "function"}, "name": _NAMED},
     "description": "a function tool of `tools`, by name"},
    {"type": "object", "title": "allowed_tools", "required": ["type", "tools"], "properties": {
        "type": {"const": "allowed_tools"}, "mode": {"enum": ["auto", "required"]},
        "tools": {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}}}},
    {"type": "object", "title": "custom", "required": ["type", "name"], "properties": {"type": {"const": "custom"}, "name": _NAMED},
     "description": "a custom tool of `tools`, by name"},
    {"type": "object", "title": "a tool of another type", "required": ["type"],
     "properties": {"type": {"enum": sorted(_TOOL_CHOICE_TYPES - {"function", "allowed_tools", "custom"})}},
     "description": "a tool of `tools` of this type (and `server_label`, `name` where given)"},
]}

_TEXT_CONFIG = {"type": ["object", "null"], "properties": {"verbosity": _TEXT, "format": {"anyOf": [
    {"type": "null"},
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "name", "schema"], "properties": {
        "type": {"const": "json_schema"}, "name": _SCHEMA_NAME,
        "schema": {"type": "object", "description": "a valid JSON Schema, of the draft its `$schema` names (else 2020-12): one the "
                                                     "draft's metaschema refuses is a 400 invalid_json_schema"}}},
]}}}

_REASONING = {"type": ["object", "null"], "additionalProperties": False, "properties": {
    "effort": {"enum": [*_EFFORTS, None]}, "summary": {"enum": [*SUMMARIES, None]}, "generate_summary": {"enum": [*SUMMARIES, None]},
    "context": {"enum": ["auto", "current_turn", "all_turns", None]}, "mode": {},
}}

_PROMPT = {"type": ["object", "null"], "required": ["id"], "additionalProperties": False, "properties": {
    "id": {"type": "string", "minLength": 1, "description": "a stored prompt's id (one not found is a 404)"},
    "version": {"anyOf": [{"type": "string", "pattern": "^0*[1-9][0-9]*$", "examples": ["1"]}, {"type": "integer", "minimum": 1},
                          {"type": "null"}]},
    "variables": {"type": ["object", "null"], "description": "values of the variables the prompt declares (a name it does not is a 400)",
                  "additionalProperties": {"anyOf": [
                      {"type": "string"},
                      {"type": "object", "required": ["type", "text"], "properties": {"type": {"const": "input_text"}, "text": {"type": "string"}}},
                      {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["input_image", "input_file"]}}}]}},
}}

_GUARDRAILS = {"type": ["array", "null"], "description": "OGX's extension: guardrails of the stack's safety provider, by name (one it does "
               "not answer to is a 400; without a safety provider, a 503)", "items": {"anyOf": [
                   _NAMED, {"type": "object", "required": ["type"], "additionalProperties": False, "properties": {"type": _NAMED}}]}}

_CONTEXT_MANAGEMENT = {"type": ["array", "null"], "items": {"type": "object", "required": ["type"], "properties": {
    "type": {"const": "compaction"}, "compact_threshold": _number(1, integer=True)}}}

_IGNORED = {
    "access_programs": _OBJECT, "background_options": _OBJECT, "image": _OBJECT, "prompt_cache_options": _OBJECT,
    "prompt_cache_retention": _TEXT, "client_metadata": _OBJECT,
}
"""OpenAI's fields this server takes and ignores (IGNORED_FIELDS)."""


def _properties(items: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"type": "string", "minLength": 1},
        "input": {"anyOf": [{"type": "string", "maxLength": MAX_STRING}, {"type": "array", "items": items}],
                  "description": "the model's server may refuse a context that holds no message (instructions, or a message item)"},
        "instructions": _TEXT, "previous_response_id": _PREVIOUS,
        "conversation": {"anyOf": [_CONVERSATION_ID, {"type": "object", "required": ["id"], "properties": {"id": _CONVERSATION_ID}},
                                   {"type": "null"}], "description": "a conversation's id (one not found is a 404)"},
        "store": _FLAG, "stream": _FLAG, "background": _FLAG, "parallel_tool_calls": _FLAG,
        "tools": {"type": ["array", "null"], "items": _TOOL}, "tool_choice": _TOOL_CHOICE,
        "max_tool_calls": _number(1, integer=True), "max_output_tokens": _number(16, integer=True), "max_infer_iters": _number(1, integer=True),
        "temperature": _number(0, 2), "top_p": _number(0, 1), "presence_penalty": _number(-2, 2), "frequency_penalty": _number(-2, 2),
        "top_logprobs": _number(0, 20, integer=True),
        "text": _TEXT_CONFIG, "reasoning": _REASONING, "metadata": METADATA_SCHEMA,
        "truncation": {"enum": ["auto", "disabled", None]},
        "include": {"type": ["array", "null"], "items": {"enum": list(INCLUDABLE)}},
        "user": _TEXT, "safety_identifier": _TEXT, "prompt_cache_key": _TEXT,
        "service_tier": {"type": ["string", "null"], "examples": ["auto"], "description": "passed to the model's server, which may refuse "
                         "a tier it does not know (OpenAI's: auto, default, flex, scale, priority)"},
        "prompt": _PROMPT, "stream_options": _OBJECT, "context_management": _CONTEXT_MANAGEMENT, "guardrails": _GUARDRAILS,
        "moderation": {"type": "null", "description": "not supported: name guardrails in `guardrails`"},
        "shields": {"type": "null", "description": "OGX's old name for `guardrails`"},
        **_IGNORED,
    }


_CONTEXT = [{"required": ["previous_response_id"], "properties": {"previous_response_id": {"type": "string"}}},
            {"required": ["conversation"], "properties": {"conversation": _NOT_NULL}}]
_CREATE_RULES: list[dict[str, Any]] = [
    {"not": {"required": ["conversation", "previous_response_id"],
             "properties": {"conversation": _NOT_NULL, "previous_response_id": _NOT_NULL}},
     "description": "`conversation` or `previous_response_id`, not both"},
    {"anyOf": [{"required": ["input"]}, {"required": ["prompt"], "properties": {"prompt": _NOT_NULL}}, *_CONTEXT],
     "description": "`input`, unless a prompt, a previous response or a conversation stands for it"},
    {"if": {"required": ["input"], "properties": {"input": {"type": "array", "maxItems": 0}}}, "then": {"anyOf": _CONTEXT},
     "description": "an empty `input` only continues a previous response or a conversation"},
]
_BACKGROUND_STORED = {"not": {"required": ["background", "store"], "properties": {"background": {"const": True}, "store": {"const": False}}},
                      "description": "a background response is stored"}

_CREATE_ITEMS = item_schema(response=True)
CREATE_BODY = json_body(["model"], _properties(_CREATE_ITEMS), more=False, rules=[*_CREATE_RULES, _BACKGROUND_STORED])
"""POST /v1/responses."""
COUNT_BODY = json_body(["model"], _properties(_CREATE_ITEMS), more=False, rules=_CREATE_RULES)
"""POST /v1/responses/input_tokens: a create body, counted as if neither streamed nor in the background."""
COMPACT_BODY = json_body(["model"], {
    "model": {"type": "string", "minLength": 1},
    "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": _CREATE_ITEMS}, {"type": "null"}]},
    "instructions": _TEXT, "previous_response_id": _PREVIOUS,
}, rules=[{"anyOf": [{"required": ["input"], "properties": {"input": {"anyOf": [{"type": "string", "minLength": 1},
                                                                              {"type": "array", "minItems": 1}]}}}, _CONTEXT[0]],
           "description": "something to compact: `input`, `previous_response_id`, or both"}])
"""POST /v1/responses/compact (other fields are taken and ignored)."""
