"""Response bodies and stream events checked against a machine-readable schema: the JSON schemas
of the `openai` SDK's own types (`Response`, each member of `ResponseStreamEvent`), validated by
`jsonschema`, plus what the Open Responses specification asks beyond them (whole-second integer
times, and keys a response always carries, null when unset).

    problems = response_problems(body)      # [] when the body conforms
    problems = event_problems(event)
"""

from __future__ import annotations

import functools
import typing
from typing import Any

import jsonschema
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel

__all__ = ["event_problems", "response_problems"]

# Keys every Response carries in the Open Responses specification (nullable ones as null).
RESPONSE_KEYS = ("id", "object", "created_at", "completed_at", "status", "incomplete_details", "model", "previous_response_id",
                 "instructions", "output", "error", "tools", "tool_choice", "truncation", "parallel_tool_calls", "text", "top_p",
                 "presence_penalty", "frequency_penalty", "top_logprobs", "temperature", "reasoning", "usage", "max_output_tokens",
                 "max_tool_calls", "store", "background", "service_tier", "metadata", "safety_identifier", "prompt_cache_key")
FUNCTION_TOOL_KEYS = ("type", "name", "description", "parameters", "strict")


@functools.cache
def _validator(model: type[BaseModel]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(model.model_json_schema(mode="serialization"))


@functools.cache
def _event_models() -> dict[str, type[BaseModel]]:
    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    models: dict[str, type[BaseModel]] = {}
    for model in typing.get_args(union):
        kind = typing.get_args(model.model_fields["type"].annotation)[0]
        models[kind] = model
    return models


def _schema_problems(model: type[BaseModel], document: Any, where: str) -> list[str]:
    problems = []
    for error in _validator(model).iter_errors(document):
        # Of a union's alternatives, name the one that came closest (the deepest error).
        best = jsonschema.exceptions.best_match([error]) if error.context else error
        path = ".".join(str(part) for part in best.absolute_path)
        problems.append(f"{where}{'.' + path if path else ''}: {best.message[:300]}")
    return problems


def response_problems(body: Any, where: str = "response") -> list[str]:
    """What keeps `body` from being a Response of the schema (nothing: an empty list)."""
    problems = _schema_problems(Response, body, where)
    if not isinstance(body, dict):
        return problems
    problems += [f"{where}: missing key {key!r}" for key in RESPONSE_KEYS if key not in body]
    for key in ("created_at", "completed_at"):
        if body.get(key) is not None and type(body[key]) is not int:
            problems.append(f"{where}.{key}: expected whole seconds (an integer), got {body[key]!r}")
    for index, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict) and tool.get("type") == "function":
            problems += [f"{where}.tools[{index}]: missing key {key!r}" for key in FUNCTION_TOOL_KEYS if key not in tool]
    return problems


def event_problems(event: Any) -> list[str]:
    """What keeps `event` from being a stream event of the schema (a response it carries included)."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return [f"event: not an object with a type: {str(event)[:120]}"]
    model = _event_models().get(event["type"])
    if model is None:
        return [f"event: unknown type {event['type']!r}"]
    problems = _schema_problems(model, event, event["type"])
    if isinstance(event.get("response"), dict):
        problems += [problem for problem in response_problems(event["response"], f"{event['type']}.response")
                     if "missing key" in problem or "whole seconds" in problem]
    return problems
