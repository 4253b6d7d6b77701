"""The Responses API's wire models: the create-response request (its schema and checks) and
the Response object it starts.

Known fields are checked with their OpenAI limits, each failure a 400 naming the field; a field
OpenAI does not know is a 400 (`unknown_parameter`), as OpenAI answers it, so a typo is not
silently a default. OpenAI's fields this server does not act on are taken and ignored
(`IGNORED_FIELDS`), and so are the extensions OGX's clients send. Tools of types other than
`function` are checked by the tool runtime that serves their type, which the request alone
cannot know.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.checks import MAX_STRING, validate_id, validate_metadata
from contract.items import check_include, shown_item, shown_items
from contract.errors import InvalidRequestError

__all__ = ["HOSTED_SHELL_ENVIRONMENTS", "HOSTED_TOOL_TYPES", "IGNORED_FIELDS", "RESPONSE_FIELDS", "CompactRequest", "CreateResponse", "ConversationRef", "hosted_shell",
           "response_object"]

_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ConversationRef(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str


class CompactRequest(BaseModel):
    """The body of POST /v1/responses/compact: the context to compact (input, a chain, or both)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None

    def check(self) -> None:
        if not self.model:
            raise InvalidRequestError("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
        validate_id(self.previous_response_id, "previous_response_id", "resp")
        if not self.input and self.previous_response_id is None:
            raise InvalidRequestError("Nothing to compact: give 'input', 'previous_response_id', or both.", param="input",
                                      code="missing_required_parameter")


class CreateResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[Any] = Field(default_factory=list)
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool | None = True
    stream: bool | None = False
    background: bool | None = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)  # OpenAI's minimum
    max_output_tokens: int | None = Field(default=None, ge=16)  # OpenAI's minimum
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt: Any = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    guardrails: list[Any] | None = None
    """OGX's extension: the safety guardrails to run on this response, by name (or `{"type": name}`)."""
    max_infer_iters: int | None = Field(default=None, ge=1)
    """OGX's extension: at most this many model calls in the response's tool loop (run.yaml's
    `max_tool_iterations` stays the ceiling)."""

    @property
    def conversation_id(self) -> str | None:
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation

    def check(self) -> None:
        """The checks pydantic's types cannot express; each a 400 naming its field."""
        if self.model_extra:
            _check_known(self.model_extra)
        if not self.model:
            raise InvalidRequestError("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
        if self.conversation is not None and self.previous_response_id is not None:
            raise InvalidRequestError(
                "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or 'conversation'.",
                param="conversation", code="invalid_value",
            )
        validate_id(self.previous_response_id, "previous_response_id", "resp")
        validate_id(self.conversation_id, "conversation", "conv")
        _check_reasoning(self.reasoning)
        if isinstance(self.input, str) and len(self.input) > MAX_STRING:
            raise InvalidRequestError(f"Invalid 'input': string too long. Expected a string with maximum length {MAX_STRING}, but got a "
                                      f"string with length {len(self.input)} instead.", param="input", code="string_above_max_length")
        if isinstance(self.input, list) and not self.input and self.previous_response_id is None and self.conversation is None:
            # Nothing to answer: OpenAI refuses it before any model is called. Left out, `input` is
            # missing (a stored prompt may stand for it, as a chain or a conversation may); sent as [], empty.
            if "input" not in self.model_fields_set:
                if self.prompt is None:
                    raise InvalidRequestError("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
            else:
                raise InvalidRequestError("Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array "
                                          "instead.", param="input", code="empty_array")
        if self.background and self.store is False:
            raise InvalidRequestError("Background responses must be stored: remove store=false.", param="background", code="invalid_value")
        validate_metadata(self.metadata)
        _check_tool_choice(self.tool_choice, self.tools or [])
        _check_tools(self.tools or [])
        _check_text_format(self.text)
        check_include(self.include or [])
        _check_context_management(self.context_management)
        _check_guardrails(self.guardrails)

    def compact_threshold(self) -> int | None:
        """The context size (tokens) past which the context is compacted first, if asked for."""
        for entry in self.context_management or ():
            if entry.get("type") == "compaction":
                return int(entry.get("compact_threshold") or DEFAULT_COMPACT_THRESHOLD)
        return None

    def guardrail_names(self) -> list[str]:
        """The guardrails the request names (`guardrails`, once checked)."""
        return [entry if isinstance(entry, str) else entry["type"] for entry in self.guardrails or ()]

    def wants_logprobs(self) -> bool:
        return bool(self.top_logprobs) or "message.output_text.logprobs" in (self.include or [])


DEFAULT_COMPACT_THRESHOLD = 100_000  # tokens: when `compact_threshold` is left out

IGNORED_FIELDS = frozenset({
    # OpenAI's, with nothing here to act on them (openai.types.responses.ResponseCreateParams).
    "access_programs", "background_options", "image", "prompt_cache_options", "prompt_cache_retention",
    "client_metadata",  # sent by the Codex CLI, which OpenAI takes
})
"""Create-response fields taken and ignored."""

_REFUSED_FIELDS = {
    # Asked-for safety is never dropped silently: the request says what runs here instead.
    "moderation": "'moderation' (OpenAI's moderation policies) is not supported by this server: name the guardrails to "
                  "run in 'guardrails' (docs/safety.md).",
    "shields": "'shields' is OGX's old name for 'guardrails': send the same names in 'guardrails'.",
}

RESPONSE_FIELDS = frozenset(CreateResponse.model_fields) | IGNORED_FIELDS | frozenset(_REFUSED_FIELDS)
"""Every field a create-response body may have; any other is a 400 `unknown_parameter`."""


def _check_known(extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key in _REFUSED_FIELDS:
            if value is not None:
                raise InvalidRequestError(_REFUSED_FIELDS[key], param=key, code="unsupported_parameter")
        elif key not in IGNORED_FIELDS:
            raise InvalidRequestError(f"Unknown parameter: '{key[:64]}'.", param=key[:64], code="unknown_parameter")


def _check_context_management(entries: list[dict[str, Any]] | None) -> None:
    for index, entry in enumerate(entries or ()):
        where = f"context_management[{index}]"
        if not isinstance(entry, dict) or entry.get("type") != "compaction":
            raise InvalidRequestError(f"Invalid value for '{where}.type': expected 'compaction'.", param=f"{where}.type",
                                      code="invalid_value")
        threshold = entry.get("compact_threshold")
        if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1):
            raise InvalidRequestError(f"Invalid value for '{where}.compact_threshold': expected a positive integer (tokens).",
                                      param=f"{where}.compact_threshold", code="invalid_value")


_TOOL_CHOICE_MODES = ("none", "auto", "required")
# Every tool_choice object type of the Responses API; only function tools run here, and a choice
# naming another type selects nothing among them.
_TOOL_CHOICE_TYPES = frozenset({
    "function", "allowed_tools", "mcp", "custom", "file_search", "web_search", "web_search_preview",
    "web_search_preview_2025_03_11", "web_search_2025_08_26", "computer", "computer_use", "computer_use_preview", "image_generation",
    "code_interpreter", "apply_patch", "shell", "programmatic_tool_calling",
})


# OpenAI's tool types that OpenAI runs (or, for `computer`, a client this server has no item for):
# those run.yaml's `unserved_tools: omit` may leave out of the model's view when no runtime serves them.
HOSTED_TOOL_TYPES = frozenset({
    "file_search", "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11", "mcp",
    "code_interpreter", "image_generation", "computer", "computer_use", "computer_use_preview", "programmatic_tool_calling",
})


HOSTED_SHELL_ENVIRONMENTS = ("container_auto", "container_reference")
"""The `environment` types of a `shell` tool that OpenAI runs (in its containers) rather than the client."""


def hosted_shell(tool: Mapping[str, Any]) -> bool:
    """Whether `tool` is a `shell` tool the server runs (a container environment), not the client."""
    environment = tool.get("environment")
    return tool.get("type") == "shell" and isinstance(environment, Mapping) and environment.get("type") in HOSTED_SHELL_ENVIRONMENTS


_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("auto", "concise", "detailed")


def _check_guardrails(guardrails: list[Any] | None) -> None:
    for index, entry in enumerate(guardrails or ()):
        name = entry.get("type") if isinstance(entry, dict) and set(entry) == {"type"} else entry
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(f"Invalid value for 'guardrails[{index}]': expected a guardrail's name, or an object with the "
                                      "name as its only field, 'type'.", param=f"guardrails[{index}]", code="invalid_value")


def _check_reasoning(reasoning: dict[str, Any] | None) -> None:
    """`reasoning`: `effort`, `summary` (or its old name `generate_summary`), `context`, `mode`."""
    if reasoning is None:
        return
    for key, allowed in (("effort", _EFFORTS), ("summary", SUMMARIES), ("generate_summary", SUMMARIES),
                         ("context", ("auto", "current_turn", "all_turns"))):
        value = reasoning.get(key)
        if value is not None and value not in allowed:
            raise InvalidRequestError(f"Invalid value: {str(value)[:40]!r}. Supported values for 'reasoning.{key}' are: "
                                      f"{', '.join(repr(a) for a in allowed)}.", param=f"reasoning.{key}", code="invalid_value")
    for key in reasoning:
        if key not in ("effort", "summary", "generate_summary", "context", "mode"):
            raise InvalidRequestError(f"Unknown parameter: 'reasoning.{key}'.", param=f"reasoning.{key}", code="unknown_parameter")


def _check_tool_choice(choice: str | dict[str, Any] | None, tools: list[dict[str, Any]]) -> None:
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICE_MODES:
            raise InvalidRequestError(
                f"Invalid value for 'tool_choice': {choice[:80]!r}. Supported values are: 'none', 'auto', 'required', or a tool choice object.",
                param="tool_choice", code="invalid_value",
            )
        return
    kind = choice.get("type")
    if kind not in _TOOL_CHOICE_TYPES:
        raise InvalidRequestError(f"Invalid value for 'tool_choice.type': {str(kind)[:80]!r} is not a tool choice type.",
                                  param="tool_choice.type", code="invalid_value")
    if kind == "function":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("Missing required parameter: 'tool_choice.name'.", param="tool_choice.name", code="missing_required_parameter")
        if not any(tool.get("type") == "function" and tool.get("name") == name for tool in tools):
            raise InvalidRequestError(f"Invalid value for 'tool_choice': tool choice 'function' with name {name[:80]!r} is not in 'tools'.",
                                      param="tool_choice", code="invalid_value")
    if kind == "allowed_tools":
        if choice.get("mode", "auto") not in ("auto", "required"):
            raise InvalidRequestError("Invalid value for 'tool_choice.mode': expected 'auto' or 'required'.", param="tool_choice.mode",
                                      code="invalid_value")
        allowed = choice.get("tools")
        if not isinstance(allowed, list) or not all(isinstance(tool, dict) and isinstance(tool.get("type"), str) for tool in allowed):
            raise InvalidRequestError("Invalid value for 'tool_choice.tools': expected an array of tool objects, each with a 'type'.",
                                      param="tool_choice.tools", code="invalid_value" if allowed is not None else "missing_required_parameter")


def _check_tools(tools: list[dict[str, Any]]) -> None:
    """Function tools are checked here; a tool of another type by the tool runtime serving it."""
    for index, tool in enumerate(tools):
        kind = tool.get("type")
        if not isinstance(kind, str) or not kind:
            raise InvalidRequestError(f"Missing required parameter: 'tools[{index}].type'.", param=f"tools[{index}].type", code="missing_required_parameter")
        if kind != "function":
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise InvalidRequestError(f"Missing required parameter: 'tools[{index}].name'.", param=f"tools[{index}].name", code="missing_required_parameter")
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise InvalidRequestError(f"Invalid type for 'tools[{index}].parameters': expected a JSON schema object.", param=f"tools[{index}].parameters", code="invalid_type")


def _check_text_format(text: dict[str, Any] | None) -> None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise InvalidRequestError("Invalid value for 'text.format.type': expected 'text', 'json_object' or 'json_schema'.", param="text.format.type", code="invalid_value")
    if fmt["type"] != "json_schema":
        return
    if not isinstance(fmt.get("name"), str) or not _SCHEMA_NAME.match(fmt["name"]):
        raise InvalidRequestError(
            "Invalid value for 'text.format.name': expected 1-64 letters, digits, underscores or dashes.", param="text.format.name", code="invalid_value"
        )
    if not isinstance(fmt.get("schema"), dict):
        raise InvalidRequestError("Invalid value for 'text.format.schema': expected a JSON schema object.", param="text.format.schema", code="invalid_value")


# --- the response object ----------------------------------------------------------------


def response_object(request: CreateResponse, response_id: str, status: str, *, conversation_id: str | None = None) -> dict[str, Any]:
    """A Response echoing the request's settings, with no output yet."""
    reasoning = request.reasoning or {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),  # whole seconds, as OpenAI and the Open Responses schema give it
        "status": status,
        "background": bool(request.background),
        "completed_at": None,
        "conversation": {"id": conversation_id} if conversation_id else None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "metadata": request.metadata or {},
        "model": request.model,
        "output": [],
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "prompt": None,
        "prompt_cache_key": request.prompt_cache_key,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary") or reasoning.get("generate_summary")},
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "default",
        "store": request.store is not False,
        "temperature": 1.0 if request.temperature is None else request.temperature,
        "text": {"format": (request.text or {}).get("format") or {"type": "text"}, "verbosity": (request.text or {}).get("verbosity") or "medium"},
        "tool_choice": request.tool_choice or "auto",
        "tools": request.tools or [],
        "top_logprobs": request.top_logprobs or 0,
        "top_p": 1.0 if request.top_p is None else request.top_p,
        "presence_penalty": 0.0 if request.presence_penalty is None else request.presence_penalty,
        "frequency_penalty": 0.0 if request.frequency_penalty is None else request.frequency_penalty,
        "truncation": request.truncation or "disabled",
        "usage": None,
        "user": request.user,
    }


def shown_response(response: dict[str, Any], include: frozenset[str]) -> dict[str, Any]:
    """The response as the client asked to see it (a copy, where anything is left out)."""
    output = response.get("output")
    shown = shown_items(output, include) if output else output
    return response if shown is output else {**response, "output": shown}


def shown_event(event: dict[str, Any], include: frozenset[str]) -> dict[str, Any]:
    """A stream event as the client asked to see it (its item or response snapshot)."""
    item = event.get("item")
    if item is not None:
        shown = shown_item(item, include)
        return event if shown is item else {**event, "item": shown}
    response = event.get("response")
    if response is not None:
        shown_snapshot = shown_response(response, include)
        return event if shown_snapshot is response else {**event, "response": shown_snapshot}
    return event
