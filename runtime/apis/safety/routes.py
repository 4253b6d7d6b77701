"""Routes of the safety API: POST /v1/moderations, in OpenAI's shape."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from runtime.apis.common import JSONBytes
from contract.checks import parse_json_object
from contract.safety.protocol import SafetyProvider
from contract.errors import InvalidRequestError
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

__all__ = ["moderation_inputs", "router"]

MAX_INPUTS = 32


def router(impl: SafetyProvider) -> Routes:
    routes = Routes()

    @routes.post("/moderations", summary="Classify text and images as potentially harmful")
    async def moderate(request: Request) -> Response:
        body = parse_json_object(await read_body(request))
        for key in body:
            if key not in ("input", "model"):
                raise InvalidRequestError(f"Unrecognized request argument supplied: {key}", param=key, code="unknown_parameter")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise InvalidRequestError("Invalid type for 'model': expected a string.", param="model", code="invalid_type")
        return JSONBytes(await impl.moderate(moderation_inputs(body.get("input")), model))

    return routes


def moderation_inputs(value: Any) -> list[str | dict[str, Any]]:
    """`input`: a string, strings, or content parts (`text`, `image_url`), as OpenAI takes it; a
    list of parts is one input."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise InvalidRequestError("Invalid 'input': expected a string, an array of strings, or an array of text and image_url parts.",
                                  param="input", code="missing_required_parameter" if value is None else "invalid_value")
    if all(isinstance(item, str) for item in value):
        if len(value) > MAX_INPUTS:
            raise InvalidRequestError(f"Invalid 'input': at most {MAX_INPUTS} strings.", param="input", code="invalid_value")
        return list(value)
    for index, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image_url" and isinstance(part.get("image_url"), dict) and isinstance(part["image_url"].get("url"), str):
            continue
        raise InvalidRequestError(f"Invalid 'input[{index}]': expected a text part or an image_url part.", param=f"input[{index}]",
                                  code="invalid_value")
    return [{"parts": list(value)}]
